package cpwork;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Random;

/** Shared by the drivers: the work directory, the phase filter, seeded data, and one failure policy. */
public final class Work {
    public final Path dir;
    public final String phase;
    public final int scale;
    public final Random random = new Random(17);

    public Work(String[] args) throws Exception {
        dir = Path.of(args[0]);
        phase = args.length > 1 ? args[1] : "all";
        scale = args.length > 2 ? Integer.parseInt(args[2]) : 1;
        Files.createDirectories(dir);
    }

    public byte[] bytes(int n) {
        byte[] b = new byte[n];
        random.nextBytes(b);
        return b;
    }

    /** Text-like bytes: compressible, so codecs do real work rather than storing. */
    public byte[] text(int n) {
        String words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi ";
        byte[] b = new byte[n];
        for (int i = 0; i < n; i++) b[i] = (byte) words.charAt((i * 7 + random.nextInt(3)) % words.length());
        return b;
    }

    public interface Step {
        void run() throws Exception;
    }

    /** One phase; a failure is printed and the driver goes on, so one missing feature costs one phase. */
    public void phase(String name, Step step) {
        if (!phase.equals("all") && !phase.equals(name)) return;
        long t0 = System.nanoTime();
        try {
            step.run();
            System.out.println("phase " + name + " ok " + (System.nanoTime() - t0) / 1_000_000 + " ms");
        } catch (Throwable e) {
            System.out.println("phase " + name + " FAILED " + e);
        }
    }

    /** Drops the pages of the file ``path``, or of every file under the directory ``path``, from the page
     * cache after writing them back (GNU dd's nocache flags: posix_fadvise DONTNEED; no root needed), so that
     * the next reads go to the disk. Where dd is missing the reads stay warm. */
    public static void evict(Path path) {
        try {
            List<Path> files;
            try (java.util.stream.Stream<Path> s = Files.walk(path)) {
                files = s.filter(Files::isRegularFile).toList();
            }
            for (Path f : files) {
                Process p = new ProcessBuilder("dd", "of=" + f, "oflag=nocache", "conv=notrunc,nocreat,fdatasync", "count=0", "status=none")
                    .redirectErrorStream(true).start();
                p.getInputStream().readAllBytes();
                p.waitFor();
            }
        } catch (IOException | InterruptedException e) {
            // warm reads then
        }
    }

    /** Sleeps ``ms`` milliseconds; an interrupt is kept for the caller's next blocking call. */
    public static void pause(int ms) {
        try { Thread.sleep(ms); } catch (InterruptedException e) { Thread.currentThread().interrupt(); }
    }
}
