package cpwork;

import java.nio.file.Files;
import java.nio.file.Path;
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
}
