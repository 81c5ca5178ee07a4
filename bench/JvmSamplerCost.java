import java.lang.management.ManagementFactory;
import java.lang.management.ThreadInfo;
import java.lang.management.ThreadMXBean;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;

/**
 * What a stack sampler costs busy JVM threads, by how it takes the stacks: the Spark plugin's way
 * ({@code ThreadMXBean.getThreadInfo} of the task threads, a global safepoint on JDK 17), one thread at a time
 * ({@code Thread.getStackTrace}, a handshake with that thread alone from JDK 19 on), and JFR's execution sampler
 * read in-process ({@code RecordingStream}, JDK 14+). Two threads do a fixed kind of work (deep calls, arithmetic)
 * beside 60 idle threads, as an executor's pool has; each mode runs in a JVM of its own, the modes interleaved
 * round after round, and the figure is the work done in the window against the run without a sampler.
 *
 * <pre>
 *   java bench/JvmSamplerCost.java [--rounds 3] [--seconds 15] [--period-ms 100]
 * </pre>
 *
 * Run it on a machine with at least as many idle cores as the two workers: the figure is the workers' loss.
 */
public final class JvmSamplerCost {
    private static final String[] MODES = {"none", "thread-info", "stack-trace", "jfr"};
    private static volatile boolean stop;

    private JvmSamplerCost() {
    }

    private static long deep(int depth, long x) {
        if (depth == 0) {
            for (int i = 0; i < 2000; i++) {
                x = x * 6364136223846793005L + 1442695040888963407L;
            }
            return x;
        }
        return deep(depth - 1, x) ^ depth;
    }

    /** One mode in this JVM: prints "mode work samples cpu_s". */
    @SuppressWarnings("deprecation")  // Thread.getId: threadId() is JDK 19+, and the bench runs on JDK 17
    private static void child(String mode, int seconds, int periodMs) throws Exception {
        AtomicLong work = new AtomicLong();
        AtomicLong samples = new AtomicLong();
        Thread[] workers = new Thread[2];
        for (int t = 0; t < workers.length; t++) {
            workers[t] = new Thread(() -> {
                long x = 1;
                long n = 0;
                while (!stop) {
                    x = deep(60, x);
                    n++;
                }
                work.addAndGet(n + (x == 7 ? 1 : 0));
            }, "worker-" + t);
        }
        for (int i = 0; i < 60; i++) {
            Thread idle = new Thread(() -> {
                try {
                    Thread.sleep(Long.MAX_VALUE);
                } catch (InterruptedException e) {
                    // ends with the JVM
                }
            });
            idle.setDaemon(true);
            idle.start();
        }
        AutoCloseable jfr = null;
        if (mode.equals("jfr")) {
            jdk.jfr.consumer.RecordingStream stream = new jdk.jfr.consumer.RecordingStream();
            stream.enable("jdk.ExecutionSample").withPeriod(Duration.ofMillis(periodMs));
            stream.onEvent("jdk.ExecutionSample", e -> {
                if (e.getStackTrace() != null && !e.getStackTrace().getFrames().isEmpty()) {
                    samples.incrementAndGet();
                }
            });
            stream.startAsync();
            jfr = stream;
        }
        for (Thread w : workers) {
            w.start();
        }
        if (mode.equals("thread-info") || mode.equals("stack-trace")) {
            ThreadMXBean mx = ManagementFactory.getThreadMXBean();
            long[] ids = {workers[0].getId(), workers[1].getId()};
            Thread sampler = new Thread(() -> {
                while (!stop) {
                    if (mode.equals("thread-info")) {
                        for (ThreadInfo info : mx.getThreadInfo(ids, 64)) {
                            if (info != null && info.getStackTrace().length > 0) {
                                samples.incrementAndGet();
                            }
                        }
                    } else {
                        for (Thread w : workers) {
                            if (w.getStackTrace().length > 0) {
                                samples.incrementAndGet();
                            }
                        }
                    }
                    try {
                        Thread.sleep(periodMs);
                    } catch (InterruptedException e) {
                        return;
                    }
                }
            }, "sampler");
            sampler.setDaemon(true);
            sampler.start();
        }
        com.sun.management.OperatingSystemMXBean os =
                (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        long cpuBefore = os.getProcessCpuTime();
        Thread.sleep(seconds * 1000L);
        stop = true;
        for (Thread w : workers) {
            w.join();
        }
        long cpu = os.getProcessCpuTime() - cpuBefore;
        if (jfr != null) {
            jfr.close();
        }
        System.out.println(mode + " " + work.get() + " " + samples.get() + " " + cpu / 1e9);
    }

    private static double median(List<Double> values) {
        double[] v = values.stream().mapToDouble(Double::doubleValue).sorted().toArray();
        return v.length % 2 == 1 ? v[v.length / 2] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2;
    }

    public static void main(String[] args) throws Exception {
        int rounds = 3;
        int seconds = 15;
        int periodMs = 100;
        for (int i = 0; i + 1 < args.length; i += 2) {
            switch (args[i]) {
                case "--child" -> {
                    child(args[i + 1], Integer.parseInt(args[i + 2]), Integer.parseInt(args[i + 3]));
                    return;
                }
                case "--rounds" -> rounds = Integer.parseInt(args[i + 1]);
                case "--seconds" -> seconds = Integer.parseInt(args[i + 1]);
                case "--period-ms" -> periodMs = Integer.parseInt(args[i + 1]);
                default -> throw new IllegalArgumentException("unknown option " + args[i]);
            }
        }
        String java = ProcessHandle.current().info().command().orElse("java");
        String source = "bench/JvmSamplerCost.java";  // run from the repository's root, as the usage says
        if (!new java.io.File(source).isFile()) {
            throw new IllegalStateException("run from the repository's root: " + source + " not found");
        }
        List<List<Double>> loss = new ArrayList<>();
        List<List<Double>> sampled = new ArrayList<>();
        for (int m = 0; m < MODES.length; m++) {
            loss.add(new ArrayList<>());
            sampled.add(new ArrayList<>());
        }
        System.out.printf("Java %s, %d rounds of %d s, sampling every %d ms%n", Runtime.version(), rounds, seconds,
                periodMs);
        for (int r = 0; r < rounds; r++) {
            // the modes in a different order each round, so that a drift of the machine falls on all
            for (int k = 0; k < MODES.length; k++) {
                int m = (k + r) % MODES.length;
                Process p = new ProcessBuilder(java, "-Xmx256m", source, "--child", MODES[m],
                        Integer.toString(seconds), Integer.toString(periodMs)).redirectErrorStream(true).start();
                String out = new String(p.getInputStream().readAllBytes()).trim();
                p.waitFor();
                String[] f = out.substring(out.lastIndexOf('\n') + 1).split(" ");
                double work = Double.parseDouble(f[1]);
                loss.get(m).add(work);
                sampled.get(m).add(Double.parseDouble(f[2]) / seconds);
            }
            double baseline = loss.get(0).get(r);
            for (int m = 1; m < MODES.length; m++) {
                loss.get(m).set(r, 1 - loss.get(m).get(r) / baseline);
            }
            loss.get(0).set(r, 0.0);
        }
        for (int m = 1; m < MODES.length; m++) {
            double[] v = loss.get(m).stream().mapToDouble(Double::doubleValue).toArray();
            Arrays.sort(v);
            System.out.printf("%-12s work lost %+.1f %% (median; %+.1f to %+.1f), %.1f stacks/s%n", MODES[m],
                    100 * median(loss.get(m)), 100 * v[0], 100 * v[v.length - 1], median(sampled.get(m)));
        }
    }
}
