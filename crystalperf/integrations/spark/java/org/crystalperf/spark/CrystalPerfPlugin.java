package org.crystalperf.spark;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadInfo;
import java.lang.management.ThreadMXBean;
import java.io.IOException;
import java.net.URL;
import java.security.CodeSource;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.logging.Level;
import java.util.logging.Logger;

import org.apache.spark.SparkContext;
import org.apache.spark.TaskContext;
import org.apache.spark.api.plugin.DriverPlugin;
import org.apache.spark.api.plugin.ExecutorPlugin;
import org.apache.spark.api.plugin.PluginContext;
import org.apache.spark.api.plugin.SparkPlugin;
import org.crystalperf.common.CpuBudget;
import org.crystalperf.common.HookCpu;
import org.crystalperf.common.IoCounters;
import org.crystalperf.common.ThreadKinds;
import org.crystalperf.common.ThreadSchedstat;

/**
 * {@code spark.plugins=org.crystalperf.spark.CrystalPerfPlugin}: samples the stacks of task threads
 * inside every executor (in local mode the executor lives in the driver JVM, same code path) and
 * ships the aggregated samples to the driver through the plugin RPC.
 *
 * Only task threads are sampled, by id, with a bounded depth: sampling every thread of the JVM costs
 * far more safepoint time.
 *
 * What the plugin does on a task's own thread costs the same whatever the task count: a task thread registers
 * once (a {@link Slot} of primitives it reuses for every task it runs), and a task's start and end write two of its
 * fields. No file is read and no system call made on a task's thread, except for the tasks picked for the
 * run-queue measurement: after each round of sampling, the next task to start on each task thread reads its own
 * run-queue delay (Linux schedstat: runnable, waiting for a core) when it starts and ends -- CPU the task wanted
 * that its CPU time does not show on a busy machine. Those tasks are a sample of every task (all of them where
 * tasks last longer than the sampling interval), and the ones the trace gives {@code cpu_wait_s}.
 *
 * The sampler keeps the hook's CPU time under a budget ({@link CpuBudget}, {@code spark.crystalperf.cpuBudget}, a
 * share of the cores the executor may use): its interval stretches while the hook uses more, never past one sample
 * per time bucket. Its own CPU time and the task callbacks' time are counted ({@link HookCpu}) and shipped to the
 * driver with the samples, for the trace's {@code hook}.
 *
 * The task thread's bytes read from storage (read_bytes of /proc/thread-self/io) are not recorded: Parquet
 * scans read on pool threads of their own (a 234 MB scan showed 74 KB on its task threads), so the task's
 * figure would be far from what it read; the listener records the process's instead (local mode).
 *
 * On a cluster each executor also reads its process's I/O counters ({@link IoCounters}, source
 * {@code executor:<id>}) and ships the new rows to the driver with its samples every second.
 */
public class CrystalPerfPlugin implements SparkPlugin {
    static final Logger LOG = Logger.getLogger("crystalperf");

    static final String LISTENER = CrystalPerfListener.class.getName();

    @Override
    public DriverPlugin driverPlugin() {
        return new DriverPlugin() {
            /**
             * Starts the listener on Spark's application status queue, whose thread handles every event anyway
             * (Spark's own status listener is there): the listener adds its callbacks to that thread's work, where
             * {@code spark.extraListeners} would start a queue of its own for it (the shared queue, which nothing
             * else uses when no SQL query listener is registered) and wake its thread for every event -- measured
             * at about 13 us a task on 50,000 tasks of 1 ms. A listener named in {@code spark.extraListeners} (a
             * configuration written by hand) is left to Spark.
             */
            @Override
            public Map<String, String> init(SparkContext sc, PluginContext ctx) {
                try {
                    boolean listed = false;
                    for (String name : sc.getConf().get("spark.extraListeners", "").split(",")) {
                        listed |= LISTENER.equals(name.trim());
                    }
                    if (!listed && sc.getConf().getBoolean("spark.crystalperf.listener", true)) {
                        sc.listenerBus().addToStatusQueue(new CrystalPerfListener(sc.getConf()));
                    }
                } catch (Throwable t) {
                    LOG.log(Level.WARNING, "crystalperf: the listener did not start (the job is not affected)", t);
                }
                try {
                    driverSampler = DriverSampler.start(sc.getConf());
                } catch (Throwable t) {
                    LOG.log(Level.WARNING, "crystalperf: the driver's sampler did not start (the job is not affected)", t);
                }
                return Collections.emptyMap();
            }

            @Override
            public void shutdown() {
                DriverSampler sampler = driverSampler;
                driverSampler = null;
                if (sampler != null) {
                    try {
                        sampler.stop();
                    } catch (Throwable t) {
                        LOG.log(Level.FINE, "crystalperf: the driver's sampler did not stop cleanly", t);
                    }
                }
            }

            @Override
            public Object receive(Object message) {
                long started = System.nanoTime();
                try {
                    if (message instanceof SampleBatch) {
                        SampleStore.add((SampleBatch) message);
                    } else if (message instanceof IoBatch) {
                        SampleStore.add((IoBatch) message);
                    }
                } catch (Throwable t) {
                    LOG.log(Level.WARNING, "crystalperf: dropping a sample batch", t);
                }
                HookCpu.since(HookCpu.RECEIVING, started);
                return null;
            }
        };
    }

    @Override
    public ExecutorPlugin executorPlugin() {
        return new Sampler();
    }

    /** The driver's own sampler (null: not started). */
    static volatile DriverSampler driverSampler;

    /** A frame as the batches carry it: class, method, file, line and jar, separated by \u0002. */
    static String encode(StackTraceElement e, String jar) {
        return e.getClassName() + '\u0002' + e.getMethodName() + '\u0002'
                + (e.getFileName() == null ? "" : e.getFileName()) + '\u0002' + e.getLineNumber() + '\u0002' + jar;
    }

    /**
     * The jar (or folder) a class was loaded from, "" where there is none to name (JDK classes, lambdas, classes of
     * other loaders); remembered in {@code cache}. {@code loader} null: the calling thread's context loader.
     */
    static String jarOf(Map<String, String> cache, ClassLoader loader, String className) {
        String found = cache.get(className);
        if (found != null) {
            return found;
        }
        String jar = "";
        try {
            ClassLoader from = loader != null ? loader : Thread.currentThread().getContextClassLoader();
            Class<?> c = Class.forName(className, false, from != null ? from : ClassLoader.getSystemClassLoader());
            CodeSource cs = c.getProtectionDomain() == null ? null : c.getProtectionDomain().getCodeSource();
            URL url = cs == null ? null : cs.getLocation();
            if (url != null) {
                jar = url.getPath();
            }
        } catch (Throwable ignored) {
            // no jar to name
        }
        cache.put(className, jar);
        return jar;
    }

    /**
     * A task thread of this executor, registered the first time it runs a task and reused for every task after:
     * what the sampler needs to know of the task running on it, in primitives. The task thread writes it as its
     * task starts and ends; the sampler reads it.
     */
    static final class Slot {
        final Thread thread;
        final long threadId;
        /** The task running on the thread; -1 between tasks. Written last as a task starts, first as it ends. */
        volatile long task = -1;
        volatile int stage = -1;
        /**
         * The time bucket in which a task of this thread last measured its run-queue delay: the first task to start
         * in a new bucket measures it (and a thread's first task of each stage). Measuring every task would put two
         * reads on every task's thread; one task a bucket per thread is enough for the stage's share of time queued
         * for a core. Read and written only by the task thread.
         */
        long measuredBucket = Long.MIN_VALUE;
        /** The run-queue delay (ns) when the current task started; -1: this task is not measured. */
        long queuedAtStart = -1;
        /**
         * A measured task that ended and whose delay the sampler has not yet taken: the task thread writes
         * {@link #endedTask}, {@link #endedStage} and {@link #endedQueuedNs}, then sets this; whoever holds the
         * sampler's lock takes them and clears it. Should the thread's next measured task end before the take, it
         * takes the lock to make room (at most once a bucket or a stage); otherwise the task thread never takes it.
         */
        volatile boolean ended;
        long endedTask;
        int endedStage;
        long endedQueuedNs;
        /** The thread's CPU ns in the kernel when it was last read (only ever raised). */
        volatile long kernelNs;

        Slot(Thread thread) {
            this.thread = thread;
            this.threadId = thread.getId();
        }
    }

    /** The executor side: registers task threads as tasks start and samples them on a daemon thread. */
    static final class Sampler implements ExecutorPlugin {
        /** The sampler of the executor living in this JVM (local mode): the driver flushes it directly. */
        static volatile Sampler local;

        /** A row of this shipment: samples of one interned stack for one task in one bucket. */
        private static final class RowKey {
            final int stage;
            final long task;
            final long bucket;
            final int stack;
            RowKey(int stage, long task, long bucket, int stack) {
                this.stage = stage;
                this.task = task;
                this.bucket = bucket;
                this.stack = stack;
            }
            @Override public boolean equals(Object o) {
                if (!(o instanceof RowKey)) {
                    return false;
                }
                RowKey k = (RowKey) o;
                return stage == k.stage && task == k.task && bucket == k.bucket && stack == k.stack;
            }
            @Override public int hashCode() {
                return ((Integer.hashCode(stage) * 31 + Long.hashCode(task)) * 31 + Long.hashCode(bucket)) * 31 + stack;
            }
        }

        /** The frames and stacks seen since the tables were last reset, each once (frames are shared by stacks). */
        static final int MAX_INTERNED = 32_768;
        private static final String[] STATES = {"runnable", "blocked", "waiting", "timed_waiting", ""};
        /** The task threads of this executor (bounded by its live task threads: a thread that ended is dropped). */
        private final java.util.concurrent.CopyOnWriteArrayList<Slot> slots = new java.util.concurrent.CopyOnWriteArrayList<>();
        private final ThreadLocal<Slot> ownSlot = new ThreadLocal<>();
        private final Map<String, String> jarOfClass = new ConcurrentHashMap<>();
        private final Map<StackTraceElement, Integer> frameIds = new HashMap<>();
        private final java.util.List<String> frameText = new java.util.ArrayList<>();
        private final Map<SampleStore.IntArray, Integer> stackIds = new HashMap<>();
        private final java.util.List<int[]> stackFrames = new java.util.ArrayList<>();  // last element: state
        private HashMap<RowKey, long[]> rows = new HashMap<>();
        /** task id -> {stage, ms waiting for the Python worker, run-queue ns (-1: none)}. */
        private HashMap<Long, long[]> taskMeasures = new HashMap<>();
        /** Measures wait for the next shipment (read without the lock by a task thread leaving the executor idle). */
        private volatile boolean measuresWaiting;
        private long dropped;
        private PluginContext ctx;
        private long intervalMs = 100;
        private long bucketMs = 1000;
        private int maxDepth = 64;
        private int maxRows = 100_000;
        private volatile boolean stopped;
        private Thread thread;
        private volatile ClassLoader taskLoader;
        private final ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        /** This executor's I/O counters (a cluster's executors; in local mode the listener's cover the JVM). */
        private volatile IoCounters io;
        private double ioShippedUpTo = Double.NEGATIVE_INFINITY;
        private CpuBudget budget;
        private CpuBudget.Pace pace;
        private long processNanosAtStart = -1;
        /** This JVM's CPU by thread kind, and its totals when the hook started (null: no /proc). */
        private ThreadKinds kinds;
        private long[] kindsAtStart;
        /** The process's minor faults and kernel ns when the hook started ({@link ThreadKinds#processFaults}). */
        private long[] faultsAtStart;
        /** Kernel ns of the task threads the executor's pool retired (written by the sampler's thread only). */
        private volatile long retiredTaskKernelNs;

        @Override
        public void init(PluginContext ctx, Map<String, String> extraConf) {
            try {
                this.ctx = ctx;
                org.apache.spark.SparkConf conf = ctx.conf();
                if (!conf.getBoolean("spark.crystalperf.sampling", true)) {
                    return;
                }
                processNanosAtStart = HookCpu.processNanos();
                kinds = new ThreadKinds(ThreadKinds.SPARK_NETWORK,
                        conf.getLong("spark.crystalperf.maxThreadBytes", 1L << 20));
                kindsAtStart = kinds.totals();
                faultsAtStart = ThreadKinds.processFaults();
                intervalMs = Math.max(1, conf.getLong("spark.crystalperf.sampleIntervalMs", 100));
                bucketMs = Math.max(intervalMs, conf.getLong("spark.crystalperf.bucketMs", 1000));
                maxDepth = conf.getInt("spark.crystalperf.maxStackDepth", 64);
                maxRows = conf.getInt("spark.crystalperf.maxSampleRows", 100_000);
                budget = Budgets.of(conf);
                // the analysis needs a sample of every running task thread in every time bucket
                pace = budget.new Pace(intervalMs, bucketMs);
                thread = new Thread(this::loop, "crystalperf-sampler");
                thread.setDaemon(true);
                thread.start();
                if ("driver".equals(ctx.executorID())) {
                    local = this;
                } else if (conf.getBoolean("spark.crystalperf.ioCounters", true)) {
                    io = new IoCounters("executor:" + ctx.executorID()).start();
                }
            } catch (Throwable t) {
                LOG.log(Level.WARNING, "crystalperf: the stack sampler did not start (the job is not affected)", t);
            }
        }

        @Override
        public void onTaskStart() {
            long started = System.nanoTime();
            try {
                if (thread == null) {
                    return;
                }
                TaskContext tc = TaskContext.get();
                if (tc == null) {
                    return;
                }
                Slot slot = ownSlot.get();
                if (slot == null) {
                    slot = register();
                }
                int stage = tc.stageId();
                // a thread's first task of each stage is measured too: every stage gets its share of time queued
                // for a core, a short last stage included (one measure per stage and thread, not per task)
                boolean newStage = stage != slot.stage;
                slot.stage = stage;
                long bucket = System.currentTimeMillis() / bucketMs;
                if (bucket != slot.measuredBucket || newStage) {
                    slot.measuredBucket = bucket;
                    slot.queuedAtStart = ThreadSchedstat.runQueueNs();
                } else {
                    slot.queuedAtStart = -1;
                }
                slot.task = tc.taskAttemptId();
            } catch (Throwable t) {
                LOG.log(Level.FINE, "crystalperf: task not registered (the job is not affected)", t);
            } finally {
                HookCpu.since(HookCpu.TASKS, started);
            }
        }

        /** The calling task thread's slot, registered once per thread. */
        private Slot register() {
            Slot slot = new Slot(Thread.currentThread());
            ownSlot.set(slot);
            if (taskLoader == null) {
                taskLoader = Thread.currentThread().getContextClassLoader();
            }
            slots.add(slot);
            return slot;
        }

        @Override
        public void onTaskSucceeded() {
            taskEnded();
        }

        @Override
        public void onTaskFailed(org.apache.spark.TaskFailedReason reason) {
            taskEnded();
        }

        /**
         * In the task thread, as its task ends: a measured task's run-queue delay since it started, kept with this
         * shipment's measures. A cluster executor's measures must reach the driver before the end of the
         * application's last tasks is reported (the next shipment could come after the trace was written), so the
         * task thread that leaves the executor with no running task sends what is waiting -- at most once a round
         * of sampling, since measures are taken only then. The job of a task cannot end before the executor's other
         * running tasks ended, and each task records its measure before it stops counting as running.
         */
        private void taskEnded() {
            long started = System.nanoTime();
            Slot slot = ownSlot.get();
            if (slot == null) {
                return;
            }
            try {
                if (slot.queuedAtStart >= 0) {
                    long waited = ThreadSchedstat.runQueueNs();
                    if (waited >= slot.queuedAtStart) {
                        if (slot.ended) {
                            // the thread's last measure is not taken yet (two stages began within a round): take
                            // it now, under the lock, which only such a task end does
                            synchronized (this) {
                                takeEnded();
                            }
                        }
                        slot.endedTask = slot.task;
                        slot.endedStage = slot.stage;
                        slot.endedQueuedNs = waited - slot.queuedAtStart;
                        slot.ended = true;
                        measuresWaiting = true;
                    }
                    slot.queuedAtStart = -1;
                }
            } catch (Throwable t) {
                LOG.log(Level.FINE, "crystalperf: task counters not recorded (the job is not affected)", t);
            }
            slot.task = -1;
            try {
                if (measuresWaiting && ctx != null && !"driver".equals(ctx.executorID()) && idle()) {
                    shipMeasures();
                }
            } catch (Throwable t) {
                LOG.log(Level.FINE, "crystalperf: task counters not sent (the job is not affected)", t);
            }
            HookCpu.since(HookCpu.TASKS, started);
        }

        /** No task runs on this executor now. */
        private boolean idle() {
            for (Slot s : slots) {
                if (s.task >= 0) {
                    return false;
                }
            }
            return true;
        }

        /** Sends the per-task measures waiting for the next shipment now (send only enqueues), without samples. */
        private void shipMeasures() throws IOException {
            SampleBatch batch;
            synchronized (this) {
                takeEnded();
                if (taskMeasures.isEmpty()) {
                    return;
                }
                int m = taskMeasures.size();
                int[] stage = new int[m];
                long[] task = new long[m];
                long[] wait = new long[m];
                long[] queue = new long[m];
                int t = 0;
                for (Map.Entry<Long, long[]> e : taskMeasures.entrySet()) {
                    long[] v = e.getValue();
                    stage[t] = (int) v[0];
                    task[t] = e.getKey();
                    wait[t] = v[1];
                    queue[t] = v[2];
                    t++;
                }
                taskMeasures = new HashMap<>();
                measuresWaiting = false;
                batch = SampleBatch.measures(ctx.executorID(), intervalMs, bucketMs, stage, task, wait, queue);
            }
            ctx.send(batch);
        }

        @Override
        public void shutdown() {
            stopped = true;
            flush();
            IoCounters counters = io;
            if (counters != null) {
                counters.stop();
                shipIo();
            }
        }

        /**
         * Sends the I/O counter rows taken since the last shipment to the driver, then forgets them here. The loop's
         * shipments and the one at shutdown take turns: two at once would send the same rows twice, out of order.
         */
        private synchronized void shipIo() {
            IoCounters counters = io;
            if (counters == null || ctx == null) {
                return;
            }
            try {
                java.util.List<IoCounters.Row> rows = counters.rowsAfter(ioShippedUpTo);
                if (rows.isEmpty()) {
                    return;
                }
                ctx.send(new IoBatch(counters.source(), rows.get(0).host, rows));
                ioShippedUpTo = rows.get(rows.size() - 1).t;
                // only the last shipped row stays: the buffer never fills, so the interval never doubles
                counters.forgetBefore(ioShippedUpTo, IoCounters.DEFAULT_INTERVAL_MS);
            } catch (Throwable t) {
                LOG.log(Level.FINE, "crystalperf: could not ship I/O counters to the driver", t);
            }
        }

        private void loop() {
            long nextShip = System.currentTimeMillis() + 1000;
            long wait = intervalMs;
            while (!stopped) {
                try {
                    Thread.sleep(wait);
                    long cpu = HookCpu.ownThreadNanos();
                    boolean sampled = sampleOnce();
                    long now = System.currentTimeMillis();
                    if (now >= nextShip) {
                        if ("driver".equals(ctx.executorID())) {
                            // a thread the pool retires keeps what it was last read to have used; an executor's
                            // flush reads it for its hook report
                            taskKernelNanos();
                        }
                        flush();
                        shipIo();
                        nextShip = now + 1000;
                    }
                    HookCpu.addOwn(HookCpu.SAMPLER, cpu);
                    wait = sampled ? pace.next() : pace.adapt();
                } catch (InterruptedException e) {
                    return;
                } catch (Throwable t) {
                    LOG.log(Level.WARNING, "crystalperf: the stack sampler stopped (the job is not affected)", t);
                    return;
                }
            }
        }

        /**
         * One round: the ended measured tasks' delays taken, the running task threads' stacks.
         */
        private boolean sampleOnce() {
            int n = 0;
            long[] tids = new long[slots.size()];
            Slot[] running = new Slot[tids.length];
            long[] taskOf = new long[tids.length];
            int[] stageOf = new int[tids.length];
            long bucket = System.currentTimeMillis() / bucketMs;
            boolean taken = false;
            for (Slot s : slots) {
                if (s.ended && !taken) {
                    synchronized (this) {
                        takeEnded();
                    }
                    taken = true;
                }
                if (!s.thread.isAlive()) {
                    slots.remove(s);  // the executor's pool retired the thread
                    retiredTaskKernelNs += s.kernelNs;
                    continue;
                }
                long task = s.task;
                if (task >= 0 && n < tids.length) {
                    tids[n] = s.threadId;
                    running[n] = s;
                    taskOf[n] = task;
                    stageOf[n] = s.stage;
                    n++;
                }
            }
            if (n == 0) {
                return false;
            }
            ThreadInfo[] infos = HookCpu.stacks(mx, Arrays.copyOf(tids, n), maxDepth, budget.cores());
            long waitedMs = pace.intervalMs();
            synchronized (this) {
                for (int i = 0; i < infos.length; i++) {
                    ThreadInfo info = infos[i];
                    // the task ended since: the stack may be of the thread's next task, or of none
                    if (info == null || running[i].task != taskOf[i]) {
                        continue;
                    }
                    StackTraceElement[] st = info.getStackTrace();
                    if (st.length == 0) {
                        continue;
                    }
                    if (waitsForPythonWorker(st)) {
                        // what one sample stands for: the time since the last round
                        measures(stageOf[i], taskOf[i])[1] += waitedMs;
                        measuresWaiting = true;
                        continue;
                    }
                    // The state is part of the stack: the same frames parked and running are different evidence.
                    int stack = intern(st, state(info));
                    if (stack < 0) {
                        dropped++;
                        continue;
                    }
                    RowKey key = new RowKey(stageOf[i], taskOf[i], bucket, stack);
                    long[] count = rows.get(key);
                    if (count != null) {
                        count[0]++;
                    } else if (rows.size() < maxRows) {
                        rows.put(key, new long[] {1});
                    } else {
                        dropped++;
                    }
                }
            }
            return true;
        }

        /** Moves the ended measured tasks' delays from their slots into this shipment's measures (under the lock). */
        private void takeEnded() {
            for (Slot s : slots) {
                if (s.ended) {
                    long[] m = measures(s.endedStage, s.endedTask);
                    m[2] = Math.max(0, m[2]) + s.endedQueuedNs;
                    s.ended = false;
                }
            }
        }

        /** The task's entry in this shipment's measures (the caller holds this sampler's lock). */
        private long[] measures(int stage, long task) {
            long[] m = taskMeasures.get(task);
            if (m == null) {
                m = new long[] {stage, 0, -1};
                taskMeasures.put(task, m);
            }
            return m;
        }

        /** Sampling rounds taken, and those the configured interval would have taken. */
        long[] paceCounts() {
            return pace == null ? new long[2] : new long[] {pace.taken(), pace.planned()};
        }

        /**
         * This JVM's CPU ns by thread kind since the hook started ({@link ThreadKinds#KINDS} order; null: unknown).
         * Reads {@code /proc/self/task}: called once per shipment, on the sampler's thread, or at the job's end.
         */
        long[] kindsSinceStart() {
            ThreadKinds k = kinds;
            long[] start = kindsAtStart;
            long[] now = k == null || start == null ? null : k.totals();
            return now == null ? null : ThreadKinds.since(now, start);
        }

        /**
         * This JVM's minor page faults and kernel CPU ns since the hook started, and its task threads' kernel ns (-1:
         * unknown); null: unknown. A fresh executor first touches its heap in the kernel, in the thread that touches
         * it: tasks that allocate much take more of those faults the more of them run side by side.
         */
        long[] faultsSinceStart() {
            long[] start = faultsAtStart;
            long[] now = start == null ? null : ThreadKinds.processFaults();
            if (now == null) {
                return null;
            }
            long[] since = ThreadKinds.since(now, start);
            return new long[] {since[0], since[1], taskKernelNanos()};
        }

        /**
         * The task threads' CPU ns in the kernel (their CPU time less their user time), the ended ones' included; -1
         * where the JVM does not measure threads' CPU. Read by the sampler once a shipment (a second), not per task:
         * a JVM reads a thread's user time from /proc. No lock: a task thread that ends a measured task may wait
         * for the sampler's, and two readers at once only raise each thread's figure to what they read.
         */
        long taskKernelNanos() {
            if (!mx.isThreadCpuTimeSupported() || !mx.isThreadCpuTimeEnabled()) {
                return -1;
            }
            long sum = retiredTaskKernelNs;
            for (Slot s : slots) {
                long cpu = mx.getThreadCpuTime(s.threadId);
                long user = cpu < 0 ? -1 : mx.getThreadUserTime(s.threadId);
                if (user >= 0 && cpu - user > s.kernelNs) {
                    s.kernelNs = cpu - user;
                }
                sum += s.kernelNs;
            }
            return sum;
        }

        /** What this executor's hook cost so far, for the driver. */
        HookReport hookReport() {
            long[] w = budget == null ? new long[2] : budget.windows();
            long process = HookCpu.processNanos();
            return new HookReport(ctx == null ? "" : ctx.executorID(), IoCounters.hostname(), HookCpu.parts(),
                    process >= 0 && processNanosAtStart >= 0 ? process - processNanosAtStart : -1,
                    processNanosAtStart, HookCpu.processStartMillis(), kindsSinceStart(), faultsSinceStart(),
                    budget == null ? 0 : budget.share(), budget == null ? 0 : budget.cores(),
                    pace == null ? 0 : pace.taken(), pace == null ? 0 : pace.planned(), w[0], w[1]);
        }

        /**
         * The thread's {@link Thread.State} lower-cased, as the trace writes it: runnable, blocked, waiting,
         * timed_waiting; "" for anything else (a task thread is never NEW or TERMINATED while registered).
         */
        static String state(ThreadInfo info) {
            Thread.State st = info.getThreadState();
            if (st == Thread.State.RUNNABLE || st == Thread.State.BLOCKED || st == Thread.State.WAITING
                    || st == Thread.State.TIMED_WAITING) {
                return st.name().toLowerCase(java.util.Locale.ROOT);
            }
            return "";
        }

        /**
         * A PySpark task thread blocked on its Python worker's socket: the work happens in the
         * worker (sampled there), so this JVM stack must not be counted as network time.
         */
        static boolean waitsForPythonWorker(StackTraceElement[] st) {
            String top = st[0].getClassName();
            if (!(top.startsWith("java.") || top.startsWith("sun.") || top.startsWith("jdk."))) {
                return false;
            }
            for (StackTraceElement e : st) {
                String c = e.getClassName();
                if (c.startsWith("org.apache.spark.api.python.") || c.startsWith("org.apache.spark.sql.execution.python.")) {
                    return true;
                }
            }
            return false;
        }

        /**
         * The id of the stack (its frames interned once each) in this executor's tables; -1 when the tables are
         * full until the next shipment resets them.
         */
        private int intern(StackTraceElement[] st, String state) {
            int[] ids = new int[st.length + 1];
            for (int i = 0; i < st.length; i++) {
                StackTraceElement e = st[i];
                Integer fid = frameIds.get(e);
                if (fid == null) {
                    if (frameIds.size() >= MAX_INTERNED) {
                        return -1;
                    }
                    fid = frameText.size();
                    frameIds.put(e, fid);
                    frameText.add(encode(e, jarOf(jarOfClass, taskLoader, e.getClassName())));
                }
                ids[i] = fid;
            }
            int s = 0;
            while (s < STATES.length - 1 && !STATES[s].equals(state)) {
                s++;
            }
            ids[st.length] = s;
            SampleStore.IntArray key = new SampleStore.IntArray(ids);
            Integer sid = stackIds.get(key);
            if (sid == null) {
                if (stackIds.size() >= MAX_INTERNED) {
                    return -1;
                }
                sid = stackFrames.size();
                stackIds.put(key, sid);
                stackFrames.add(ids);
            }
            return sid;
        }

        /** Ship what was aggregated since the last shipment to the driver (or store it directly). */
        void flush() {
            SampleBatch batch;
            synchronized (this) {
                takeEnded();
                if (rows.isEmpty() && taskMeasures.isEmpty() && dropped == 0) {
                    return;
                }
                batch = takeBatch();
            }
            batch.hook = "driver".equals(ctx.executorID()) ? null : hookReport();
            try {
                if ("driver".equals(ctx.executorID())) {
                    SampleStore.add(batch);
                } else {
                    ctx.send(batch);
                }
            } catch (Throwable t) {
                LOG.log(Level.WARNING, "crystalperf: could not ship samples to the driver", t);
            }
        }

        /** This shipment's rows with the stacks and frames they use, as arrays; the buffers start over. */
        private SampleBatch takeBatch() {
            Map<Integer, Integer> batchStack = new HashMap<>();
            Map<Integer, Integer> batchFrame = new HashMap<>();
            java.util.List<String> frames = new java.util.ArrayList<>();
            java.util.List<int[]> stacks = new java.util.ArrayList<>();
            java.util.List<String> states = new java.util.ArrayList<>();
            int n = rows.size();
            int[] rowStage = new int[n];
            long[] rowTask = new long[n];
            long[] rowBucket = new long[n];
            int[] rowStack = new int[n];
            long[] rowCount = new long[n];
            int r = 0;
            for (Map.Entry<RowKey, long[]> e : rows.entrySet()) {
                RowKey k = e.getKey();
                Integer bs = batchStack.get(k.stack);
                if (bs == null) {
                    int[] ids = stackFrames.get(k.stack);
                    int[] local = new int[ids.length - 1];
                    for (int i = 0; i < local.length; i++) {
                        Integer bf = batchFrame.get(ids[i]);
                        if (bf == null) {
                            bf = frames.size();
                            batchFrame.put(ids[i], bf);
                            frames.add(frameText.get(ids[i]));
                        }
                        local[i] = bf;
                    }
                    bs = stacks.size();
                    batchStack.put(k.stack, bs);
                    stacks.add(local);
                    states.add(STATES[ids[ids.length - 1]]);
                }
                rowStage[r] = k.stage;
                rowTask[r] = k.task;
                rowBucket[r] = k.bucket;
                rowStack[r] = bs;
                rowCount[r] = e.getValue()[0];
                r++;
            }
            int m = taskMeasures.size();
            int[] taskStage = new int[m];
            long[] taskId = new long[m];
            long[] taskWait = new long[m];
            long[] taskQueue = new long[m];
            int t = 0;
            for (Map.Entry<Long, long[]> e : taskMeasures.entrySet()) {
                long[] v = e.getValue();
                taskStage[t] = (int) v[0];
                taskId[t] = e.getKey();
                taskWait[t] = v[1];
                taskQueue[t] = v[2];
                t++;
            }
            SampleBatch batch = new SampleBatch(ctx.executorID(), intervalMs, bucketMs, frames.toArray(new String[0]),
                    stacks.toArray(new int[0][]), states.toArray(new String[0]), rowStage, rowTask, rowBucket, rowStack,
                    rowCount, taskStage, taskId, taskWait, taskQueue, dropped);
            rows = new HashMap<>();
            taskMeasures = new HashMap<>();
            measuresWaiting = false;
            dropped = 0;
            if (frameIds.size() >= MAX_INTERNED / 2 || stackIds.size() >= MAX_INTERNED / 2) {
                // Batches carry their own tables, so forgetting ours costs only re-encoding the next stacks.
                frameIds.clear();
                frameText.clear();
                stackIds.clear();
                stackFrames.clear();
            }
            return batch;
        }
    }
}
