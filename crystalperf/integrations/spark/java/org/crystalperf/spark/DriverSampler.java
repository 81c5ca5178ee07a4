package org.crystalperf.spark;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadInfo;
import java.lang.management.ThreadMXBean;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.logging.Level;

import org.apache.spark.SparkConf;
import org.crystalperf.common.CpuBudget;
import org.crystalperf.common.HookCpu;

/**
 * Samples the driver JVM's own work on the application's calls: the thread that runs a Scala or Java program's
 * {@code main}, the threads that serve a PySpark program's calls into the JVM (py4j's connection threads) and a Spark
 * Connect server's threads running its clients' requests, while they use a core. That is where a query is analysed and optimised, a wide plan built column by column, MLlib's
 * optimiser iterates between jobs, a broadcast is built: work no task does and no operation holds. Its rows are keyed
 * to {@link #DRIVER_STAGE}, which the trace writes as the operation {@code (driver)}.
 *
 * <p>A CPU profile of those threads, cheap when the driver waits: each round reads their CPU clocks (a system call
 * each, no safepoint) and adds what each used to its credit; a thread whose credit reached an interval has its stack
 * taken (one safepoint for all such threads), and a stack running outside a job's wait and outside py4j's wait for
 * the next command counts one sample for each interval of credit, which it spends. A stack that is not (parked
 * waiting for a job's stages, idle on the socket) keeps the credit for a later round, up to {@link #MAX_CREDIT}
 * intervals: the CPU it stands for is the thread's work between such waits. So the samples add up to about the
 * CPU time the threads used on the program's calls, whatever the sampling rate. What it misses: a driver thread
 * blocked in I/O (a file listing on a slow store) uses no core and is not sampled. Shares the process's CPU budget
 * with the executor's sampler.
 */
final class DriverSampler {
    /** The stage of the rows of the driver's own work (no stage of Spark's is negative). */
    static final int DRIVER_STAGE = -2;
    /** The most intervals of CPU time a thread's credit holds (its stacks were all parked meanwhile). */
    static final int MAX_CREDIT = 10;
    /** The threads that ended are forgotten this often. */
    private static final long DISCOVER_MS = 2000;
    /** The name of a Spark Connect server's thread running one request (Spark's CONNECT_EXECUTE_THREAD_PREFIX). */
    static final String CONNECT_THREAD = "SparkConnectExecuteThread";
    /** Threads remembered (candidates or not) before the table is cleared and rebuilt. */
    private static final int MAX_KNOWN = 4096;
    private static final String[] STATES = {"runnable", "blocked", "waiting", "timed_waiting", ""};
    /** The depth of the stacks taken: a whole driver stack (its entry is far from where it works). */
    private static final int FULL_DEPTH = 2048;
    /** The outermost frames kept of a stack deeper than the configured depth. */
    private static final int OUTER_FRAMES = 48;
    /**
     * Rows of a shipment (a second): each holds its stack's encoded frames, so a few thousand bound it to tens of
     * megabytes where the executors' rows share interned frames.
     */
    private static final int MAX_ROWS = 2000;
    /** Classes whose jar is remembered before the table starts over. */
    private static final int MAX_JARS = 20_000;

    private final ThreadMXBean mx = ManagementFactory.getThreadMXBean();
    private final long intervalMs;
    private final long bucketMs;
    private final int maxDepth;
    private final int maxRows;
    private final CpuBudget budget;
    private final CpuBudget.Pace pace;
    /** Thread id -> whether it serves the application's calls (looked at once). */
    private final Map<Long, Boolean> known = new HashMap<>();
    /** Candidate thread id -> {its CPU time (ns) at the previous round, its credit (ns) not yet sampled}. */
    private final Map<Long, long[]> lastCpu = new HashMap<>();
    private final Map<String, String> jars = new ConcurrentHashMap<>();
    /** This shipment's rows: bucket and encoded stack (frames, then the state) -> samples. */
    private Map<List<String>, long[]> rows = new HashMap<>();
    private long dropped;
    private volatile boolean stopped;
    private Thread thread;

    private DriverSampler(SparkConf conf) {
        intervalMs = Math.max(1, conf.getLong("spark.crystalperf.sampleIntervalMs", 100));
        bucketMs = Math.max(intervalMs, conf.getLong("spark.crystalperf.bucketMs", 1000));
        maxDepth = conf.getInt("spark.crystalperf.maxStackDepth", 64);
        maxRows = Math.min(MAX_ROWS, conf.getInt("spark.crystalperf.maxSampleRows", 100_000));
        budget = Budgets.of(conf);
        pace = budget.new Pace(intervalMs, bucketMs);
    }

    /** Starts the sampler where sampling and it are on and the JVM measures threads' CPU time; null otherwise. */
    static DriverSampler start(SparkConf conf) {
        if (!conf.getBoolean("spark.crystalperf.sampling", true)
                || !conf.getBoolean("spark.crystalperf.driverSampling", true)) {
            return null;
        }
        ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        if (!mx.isThreadCpuTimeSupported()) {
            return null;
        }
        if (!mx.isThreadCpuTimeEnabled()) {
            mx.setThreadCpuTimeEnabled(true);
        }
        DriverSampler sampler = new DriverSampler(conf);
        sampler.thread = new Thread(sampler::loop, "crystalperf-driver-sampler");
        sampler.thread.setDaemon(true);
        sampler.thread.start();
        return sampler;
    }

    void stop() {
        stopped = true;
        Thread t = thread;
        if (t != null) {
            t.interrupt();
        }
        flush();
    }

    private void loop() {
        long nextDiscover = 0;
        long nextShip = System.currentTimeMillis() + 1000;
        long wait = intervalMs;
        while (!stopped) {
            try {
                Thread.sleep(wait);
                long cpu = HookCpu.ownThreadNanos();
                long now = System.currentTimeMillis();
                discover(now >= nextDiscover);
                if (now >= nextDiscover) {
                    nextDiscover = now + DISCOVER_MS;
                }
                boolean sampled = sampleOnce(now / bucketMs);
                if (now >= nextShip) {
                    flush();
                    nextShip = now + 1000;
                }
                HookCpu.addOwn(HookCpu.SAMPLER, cpu);
                wait = sampled ? pace.next() : pace.adapt();
            } catch (InterruptedException e) {
                return;
            } catch (Throwable t) {
                CrystalPerfPlugin.LOG.log(Level.WARNING,
                        "crystalperf: the driver's sampler stopped (the job is not affected)", t);
                return;
            }
        }
    }

    /**
     * Looks at the threads not seen before (their names, which need no safepoint): a thread named {@code main}, one
     * that runs a Spark Connect request ({@link #CONNECT_THREAD}, one per operation), or one whose stack starts in
     * py4j's connection loop (its stack taken once) serves the application's calls; Spark's and the JDK's own threads
     * are passed over. Every round, so that a Connect request's thread is found in its first round; the threads that
     * ended are forgotten every {@link #DISCOVER_MS}.
     */
    private void discover(boolean prune) {
        long[] ids = mx.getAllThreadIds();
        if (known.size() > MAX_KNOWN) {
            known.clear();
        }
        long[] fresh = java.util.Arrays.stream(ids).filter(id -> !known.containsKey(id)).toArray();
        List<Long> look = new ArrayList<>();
        for (ThreadInfo info : fresh.length == 0 ? new ThreadInfo[0] : mx.getThreadInfo(fresh)) {
            if (info == null) {
                continue;
            }
            long id = info.getThreadId();
            String name = info.getThreadName();
            boolean connect = name.startsWith(CONNECT_THREAD);
            if ("main".equals(name) || connect) {
                known.put(id, Boolean.TRUE);
                // a request's thread works on it from its start: all its CPU time is the request's
                lastCpu.put(id, new long[] {connect ? 0 : mx.getThreadCpuTime(id), 0});
            } else if (name.startsWith("Thread-")) {
                look.add(id);  // py4j's connection threads have the JDK's default names
            } else {
                known.put(id, Boolean.FALSE);
            }
        }
        if (!look.isEmpty()) {
            long[] lookIds = look.stream().mapToLong(Long::longValue).toArray();
            ThreadInfo[] infos = HookCpu.stacks(mx, lookIds, Integer.MAX_VALUE, budget.cores());
            for (int i = 0; i < infos.length; i++) {
                boolean serves = infos[i] != null && servesPython(infos[i].getStackTrace());
                known.put(lookIds[i], serves);
                if (serves) {
                    lastCpu.put(lookIds[i], new long[] {mx.getThreadCpuTime(lookIds[i]), 0});
                }
            }
        }
        if (prune) {
            java.util.Set<Long> alive = new java.util.HashSet<>();
            for (long id : ids) {
                alive.add(id);
            }
            known.keySet().retainAll(alive);
            lastCpu.keySet().retainAll(alive);
        }
    }

    /** A py4j connection thread: its outermost frames are py4j's loop reading the Python side's commands. */
    static boolean servesPython(StackTraceElement[] st) {
        for (int i = st.length - 1; i >= 0 && i >= st.length - 4; i--) {
            String c = st[i].getClassName();
            if (c.startsWith("py4j.") && c.endsWith("Connection") && "run".equals(st[i].getMethodName())) {
                return true;
            }
        }
        return false;
    }

    /**
     * One round: the candidates' CPU clocks into their credits, and the stacks of those with an interval's credit. A
     * stack inside a job's wait is the job's, one at py4j's socket read is idle, one parked or blocked does no work:
     * none is kept, and the thread keeps its credit.
     */
    private boolean sampleOnce(long bucket) {
        if (lastCpu.isEmpty()) {
            return false;
        }
        long intervalNs = intervalMs * 1_000_000L;
        long[] due = new long[lastCpu.size()];
        long[][] state = new long[due.length][];
        int n = 0;
        for (Map.Entry<Long, long[]> e : lastCpu.entrySet()) {
            long cpu = mx.getThreadCpuTime(e.getKey());
            long[] s = e.getValue();
            if (cpu < 0) {
                continue;  // ended
            }
            if (s[0] >= 0 && cpu >= s[0]) {
                s[1] = Math.min(MAX_CREDIT * intervalNs, s[1] + cpu - s[0]);
            }
            s[0] = cpu;
            if (s[1] >= intervalNs) {
                state[n] = s;
                due[n++] = e.getKey();
            }
        }
        if (n == 0) {
            return false;
        }
        ThreadInfo[] infos = HookCpu.stacks(mx, java.util.Arrays.copyOf(due, n), FULL_DEPTH, budget.cores());
        synchronized (this) {
            for (int i = 0; i < infos.length; i++) {
                ThreadInfo info = infos[i];
                StackTraceElement[] st = info == null ? null : info.getStackTrace();
                if (st == null || st.length == 0 || info.getThreadState() != Thread.State.RUNNABLE || insideJob(st)
                        || idleInPy4j(st)) {
                    continue;
                }
                long count = state[i][1] / intervalNs;
                state[i][1] -= count * intervalNs;
                st = elided(st);
                if (jars.size() > MAX_JARS) {
                    jars.clear();
                }
                List<String> key = new ArrayList<>(st.length + 2);
                key.add(Long.toString(bucket));
                for (StackTraceElement e : st) {
                    key.add(CrystalPerfPlugin.encode(e, CrystalPerfPlugin.jarOf(jars, null, e.getClassName())));
                }
                key.add(CrystalPerfPlugin.Sampler.state(info));
                long[] c = rows.get(key);
                if (c != null) {
                    c[0] += count;
                } else if (rows.size() < maxRows) {
                    rows.put(key, new long[] {count});
                } else {
                    dropped += count;
                }
            }
        }
        return true;
    }

    /**
     * The innermost {@code maxDepth} frames (what did the work) and the outermost {@link #OUTER_FRAMES} (the program's
     * call into Spark, which a query's analysis reaches through hundreds of recursive frames), the middle left out.
     */
    private StackTraceElement[] elided(StackTraceElement[] st) {
        if (st.length <= maxDepth + OUTER_FRAMES) {
            return st;
        }
        StackTraceElement[] kept = java.util.Arrays.copyOf(st, maxDepth + OUTER_FRAMES);
        System.arraycopy(st, st.length - OUTER_FRAMES, kept, maxDepth, OUTER_FRAMES);
        return kept;
    }

    /** The thread waits for a job it submitted (its time is the job's operations'). */
    private static boolean insideJob(StackTraceElement[] st) {
        for (StackTraceElement e : st) {
            if ("org.apache.spark.scheduler.DAGScheduler".equals(e.getClassName()) && "runJob".equals(e.getMethodName())) {
                return true;
            }
        }
        return false;
    }

    /** A py4j thread waiting for the Python side's next command: the first frame of code not the JDK's is py4j's. */
    private static boolean idleInPy4j(StackTraceElement[] st) {
        for (StackTraceElement e : st) {
            String c = e.getClassName();
            if (!(c.startsWith("java.") || c.startsWith("sun.") || c.startsWith("jdk."))) {
                return c.startsWith("py4j.") && !c.startsWith("py4j.reflection.");
            }
        }
        return false;
    }

    /** Stores this shipment's rows with the executors' samples, then starts over. */
    void flush() {
        Map<List<String>, long[]> taken;
        long lost;
        synchronized (this) {
            if (rows.isEmpty() && dropped == 0) {
                return;
            }
            taken = rows;
            lost = dropped;
            rows = new HashMap<>();
            dropped = 0;
        }
        Map<String, Integer> frameIds = new HashMap<>();
        List<String> frames = new ArrayList<>();
        int[][] stacks = new int[taken.size()][];
        String[] states = new String[taken.size()];
        int[] rowStage = new int[taken.size()];
        long[] rowTask = new long[taken.size()];
        long[] rowBucket = new long[taken.size()];
        int[] rowStack = new int[taken.size()];
        long[] rowCount = new long[taken.size()];
        int r = 0;
        for (Map.Entry<List<String>, long[]> e : taken.entrySet()) {
            List<String> key = e.getKey();
            int[] stack = new int[key.size() - 2];
            for (int i = 0; i < stack.length; i++) {
                stack[i] = frameIds.computeIfAbsent(key.get(i + 1), f -> {
                    frames.add(f);
                    return frames.size() - 1;
                });
            }
            stacks[r] = stack;
            String state = key.get(key.size() - 1);
            states[r] = java.util.Arrays.asList(STATES).contains(state) ? state : "";
            rowStage[r] = DRIVER_STAGE;
            rowBucket[r] = Long.parseLong(key.get(0));
            rowStack[r] = r;
            rowCount[r] = e.getValue()[0];
            r++;
        }
        SampleStore.add(new SampleBatch(null, intervalMs, bucketMs, frames.toArray(new String[0]), stacks, states,
                rowStage, rowTask, rowBucket, rowStack, rowCount, new int[0], new long[0], new long[0], new long[0],
                lost));
    }

    /** Rounds taken so far, and those the configured interval would have taken. */
    long[] paceCounts() {
        return new long[] {pace.taken(), pace.planned()};
    }
}
