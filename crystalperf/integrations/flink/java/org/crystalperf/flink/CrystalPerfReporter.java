package org.crystalperf.flink;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadInfo;
import java.lang.management.ThreadMXBean;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.Map;
import java.util.logging.Level;
import java.util.logging.Logger;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.Gauge;
import org.apache.flink.metrics.Meter;
import org.apache.flink.metrics.Metric;
import org.apache.flink.metrics.MetricConfig;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.metrics.reporter.MetricReporter;
import org.crystalperf.common.CpuBudget;
import org.crystalperf.common.HeapPressure;
import org.crystalperf.common.HookCpu;
import org.crystalperf.common.IoCounters;
import org.crystalperf.common.ThreadKinds;

/**
 * Collects the numeric metrics of every job/task/operator/subtask and writes one JSON file per job
 * ({@code crystalperf-flink-<job_id>.json}) that the Python side turns into a crystalperf trace.
 *
 * <p>Final values are taken in {@link #notifyOfRemovedMetric}: the last scheduled report can precede
 * the end of a task. A job's file is written when its last metric goes away (the job ended, failed or
 * was cancelled) and, for whatever is still open, at {@link #close}. Every callback swallows its own
 * errors so the reporter never fails the job.
 *
 * <p>Each part also holds this process's I/O counter rows ({@link IoCounters}: one sampler per JVM) over the
 * job's span, with one row before and one after (part format version 3), and (version 5) the process's CPU time
 * over the job split by thread kind ({@link ThreadKinds}): the job's task threads, the netty threads, the
 * collector's, the compilers', the hook's own and the rest.
 *
 * <p>What the reporter costs is measured by itself ({@link HookCpu}: its sampler thread, its metric callbacks, the
 * parts it writes, the I/O counters) and written in each part (version 6, {@code hook}). The sampler keeps the
 * hook's CPU time under a budget ({@code cpu.budget}, a share of the cores the process may use, default 0.01):
 * its interval stretches while the hook uses more, never past one sample a second. Between two scans of the
 * JVM's thread names (once a second, or when a task or any thread starts) it samples the task threads it found, by id.
 */
public class CrystalPerfReporter implements MetricReporter {
    private static final Logger LOG = Logger.getLogger(CrystalPerfReporter.class.getName());
    /** Flink's names (MetricNames) of the JobManager's gauges of the cluster's registered slots and TaskManagers. */
    static final String TASK_SLOTS_TOTAL = "taskSlotsTotal";
    static final String REGISTERED_TASK_MANAGERS = "numRegisteredTaskManagers";
    /** Bounds memory on jobs with very many subtasks; metrics beyond it are dropped and counted. */
    private int maxScopesPerJob = 200_000;

    private final Map<String, Job> jobs = new HashMap<>();
    /** Jobs whose metrics are all gone, oldest first; kept in case a later stage of the job comes back. */
    private final java.util.LinkedHashSet<String> finished = new java.util.LinkedHashSet<>();
    private static final int MAX_FINISHED_JOBS = 16;
    private final Map<Metric, Entry> live = new HashMap<>();
    /** The JobManager's gauges of the task slots and TaskManagers registered with the cluster (part format 8): what
     * a job could have spread over beyond the TaskManagers it ran on. Null in a process without them. */
    private Metric clusterSlots;
    private Metric clusterTaskManagers;
    private Path outputDir = Paths.get(".");
    /** Aggregated stack samples are bounded per job in rows and in (estimated) bytes: past either bound a new
     * stack folds into the "[other]" stack and a new row into its subtask's "[other]" row, so every sample
     * stays counted for its subtask; such samples are counted in dropped_samples. */
    private int maxSampleRowsPerJob = 50_000;
    private long maxSampleBytesPerJob = 32L * 1024 * 1024;
    /** The stack that stands for what the byte bound left out (part format version 4). */
    static final String OTHER_STACK = "[other]\t\t0\n";
    /** Estimated heap of one interned stack (the string, twice its characters, and its map entries) and of
     * one row (its key and count in the map) beyond its characters. */
    private static final int STACK_BYTES = 200;
    private static final int ROW_BYTES = 160;
    private static final int MAX_STACK_DEPTH = 64;
    private static final String LEGACY_SOURCE_THREAD = "Legacy Source Thread - ";
    /** A FLIP-27 source reads in these threads (SplitFetcherManager names them after the task thread); the
     * task thread only waits for what they fetched. */
    private static final String FETCHER_THREAD = "Source Data Fetcher for ";
    /** The thread role of a fetcher's samples (the task thread's role is empty). */
    private static final String FETCHER_ROLE = "fetcher";
    /** Bounds the recorded classpath of a job (entries beyond it are left out). */
    private static final int MAX_CLASSPATH_ENTRIES = 10_000;
    private static final long PROCESS_ID = ProcessHandle.current().pid();
    private static final double BUCKET_S = 1.0;
    private long sampleIntervalMs = 100;
    private long flushIntervalMs = 5000;
    /** The share of the hook's CPU budget the rewrites of open jobs' parts may take: each rewrites a part whole, and a
     * part grows with a long job, so a fixed interval would cost more and more of the budget the samplers need. */
    static final double FLUSH_BUDGET_SHARE = 0.25;
    /** The longest wait between two rewrites of an open job's part: what a SIGKILL may lose at most. */
    static final long MAX_FLUSH_WAIT_MS = 120_000;
    /** The Python module that finishes a job (crystalperf.integrations.flink.finish, run with -m). */
    private static final String FINISH_MODULE = "crystalperf.integrations.flink.finish";
    /** Python interpreter with crystalperf that analyses a job's parts once it ended here (empty: none). */
    private String analyzePython = "";
    /** Where crystalperf's Python package lies (its parent directory; empty: import it as the interpreter finds
     * it), for the sampler started in the embedded interpreter of Python functions run in thread mode. */
    private String pythonPath = "";
    /** The output directories for which this process started the embedded interpreter's sampler (one a directory:
     * the process has one interpreter, its jobs may write to several directories). */
    private static final java.util.Set<String> EMBEDDED_SAMPLERS = java.util.concurrent.ConcurrentHashMap.newKeySet();
    private volatile boolean embeddedSamplerStarted;
    /** pemja's class: a task thread calling into the embedded interpreter has it on top of its stack. */
    private static final String PEMJA_INTERPRETER = "pemja.core.PythonInterpreter";
    /** Jobs whose analysis this process started, so a job is analysed once per process. */
    private final java.util.Set<String> analysed = new java.util.HashSet<>();
    private double sampleOrigin = System.currentTimeMillis() / 1000.0;
    /** Thread-name prefix "task_name (subtask+1/" of every live task -> its job and subtask. */
    private final Map<String, String[]> taskThreads = new HashMap<>();
    private Thread sampler;
    private volatile boolean closed;
    /** Writes the open jobs' parts when the JVM exits without closing the reporter (its driver was stopped). */
    private Thread exitHook;
    static final String CUT_AT_CLOSE = "the reporter closed while the job ran";
    static final String CUT_AT_EXIT = "the JVM exited while the job ran (its driver or cluster was stopped)";
    /** How long the JVM's exit waits for the open jobs' parts at most. */
    static final long EXIT_WAIT_MS = 3000;
    /** This process's I/O counters, shared by the reporters of the JVM (one sampler a process). */
    private static IoCounters ioCounters;
    private static int ioUsers;
    private boolean usesIo;
    /** This process's CPU time by thread kind (bounded in bytes by max.thread.bytes). */
    private ThreadKinds threadKinds = new ThreadKinds(ThreadKinds.FLINK_NETWORK, 1L << 20);
    /** How often the sampler re-reads the threads' CPU times (a thread that ends loses at most this much). */
    private static final long THREAD_KINDS_INTERVAL_MS = 1000;
    /** How often the sampler re-reads every thread's name to find the task threads (sooner when a task or a thread starts). */
    private static final long THREAD_SCAN_INTERVAL_MS = 1000;
    /** Bumped when a task thread prefix is added or removed: the next round scans the thread names again. */
    private volatile long taskThreadsVersion;
    /** The task threads the last scan found: ids, their owners, legacy-source flags and roles. */
    private long scannedVersion = -1;
    private long scannedStarted = -1;
    private long lastScan;
    /** When the task threads' user times were last read (ms): a JVM reads a thread's from /proc, so once a second. */
    private long lastKernelRead;
    private long[] scanIds = new long[0];
    private List<String[]> scanOwners = new ArrayList<>();
    private List<Boolean> scanLegacy = new ArrayList<>();
    private List<String> scanRoles = new ArrayList<>();
    private CpuBudget budget;
    private CpuBudget.Pace pace;


    private static final class Entry {
        final String jobId;
        final String key;
        final Metric metric;
        Entry(String jobId, String key, Metric metric) {
            this.jobId = jobId;
            this.key = key;
            this.metric = metric;
        }
    }

    private static final class Job {
        final String id;
        String name = "";
        /** Why the job's part was written before the job ended (the reporter closed, the JVM exited); null: not. */
        volatile String cut;
        final Map<String, Map<String, String>> scopes = new LinkedHashMap<>();
        final Map<String, Double> finals = new LinkedHashMap<>();
        int liveCount;
        long dropped;
        /** task\u0001subtask\u0001bucket\u0001state\u0001role\u0001stack id -> samples. */
        final Map<String, Long> samples = new HashMap<>();
        /** Interned stacks ("class.method\tfile\tline\n" per frame, top first) and their ids. */
        final List<String> stacks = new ArrayList<>();
        final Map<String, Integer> stackIds = new HashMap<>();
        /** Samples that found no row: task\u0001subtask\u0001state\u0001role -> {count, latest bucket}. */
        final Map<String, long[]> held = new HashMap<>();
        /** Estimated bytes of stacks and rows. */
        long sampleBytes;
        long droppedSamples;
        final double firstSeen = System.currentTimeMillis() / 1000.0;
        /** CPU time of this whole process when the job was first seen (ns, -1 when unknown). */
        final long processCpuAtStart = HookCpu.processNanos();
        /** The process's CPU time per thread kind then ({@link ThreadKinds#totals}; null: unknown). */
        final long[] kindsAtStart;
        /** The process's minor faults and kernel time then ({@link ThreadKinds#processFaults}; null: unknown). */
        final long[] faultsAtStart = ThreadKinds.processFaults();
        /** The hook's CPU time by part, its sampling rounds (taken, planned) and budget windows (all, over) then. */
        final long[] hookAtStart = HookCpu.parts();
        long[] paceAtStart = new long[4];
        /** The most task slots and TaskManagers the cluster had registered while the job's metrics were seen (0:
         * unknown): read when the job starts and at each snapshot, since the JobManager's gauges go (or read 0) as a
         * local cluster shuts down before the job's last part is written. */
        double clusterSlots;
        double clusterTaskManagers;
        /** The part's rewrites while the job was open (the last write not counted). */
        long rewrites;
        /** Latest CPU time (ns) of each thread of a subtask, "task_name\u0001subtask\u0001role\u0001thread id" -> ns,
         * seen by the sampler: a legacy source's subtask runs on two threads (the task's and the source's), a FLIP-27
         * source's on its task thread and its fetcher threads (role FETCHER_ROLE). */
        final Map<String, Long> threadCpu = new HashMap<>();
        /** The same threads' CPU ns in the kernel (CPU time less user time), read at most once a second. */
        final Map<String, Long> threadKernel = new HashMap<>();
        /** The heap's live data and the collections while the job ran (version 9). */
        final HeapPressure.Tracker heap = new HeapPressure.Tracker();
        /** Scope key -> {when its first metric was registered, when its last was removed} (s, 0: not yet):
         * a task's metric group lives from the task's deployment to its end. */
        final Map<String, double[]> scopeTimes = new HashMap<>();
        /** Jars and class directories the job's code was loaded from (bytecode for the source locator). */
        final LinkedHashSet<String> classpath = new LinkedHashSet<>(jvmClasspath());
        /** Class loaders whose URLs are already in classpath (by identity). */
        final java.util.Set<ClassLoader> seenLoaders =
                java.util.Collections.newSetFromMap(new java.util.IdentityHashMap<>());
        double lastRemoved;
        /** Metric and sample events seen, and how many of them the last written part contains. */
        long events;
        long eventsWritten = -1;
        /** Snapshots taken, and the newest one on disk (guarded by writeLock). */
        long snapshots;
        final Object writeLock = new Object();
        long writtenSequence;
        boolean changedSinceWrite() {
            return events != eventsWritten;
        }
        Job(String id, long[] kindsAtStart) {
            this.id = id;
            this.kindsAtStart = kindsAtStart;
        }
    }

    @Override
    public void open(MetricConfig config) {
        try {
            String dir = config.getString("output.dir", System.getProperty("user.dir", "."));
            outputDir = Paths.get(dir);
            sampleIntervalMs = Long.parseLong(config.getString("sample.interval.ms", "100"));
            maxScopesPerJob = Integer.parseInt(config.getString("max.scopes", String.valueOf(maxScopesPerJob)));
            maxSampleRowsPerJob = Integer.parseInt(
                    config.getString("max.sample.rows", String.valueOf(maxSampleRowsPerJob)));
            maxSampleBytesPerJob = Long.parseLong(
                    config.getString("max.sample.bytes", String.valueOf(maxSampleBytesPerJob)).trim());
        } catch (RuntimeException e) {
            LOG.log(Level.WARNING, "crystalperf: bad reporter configuration, using the working directory", e);
        }
        try {
            threadKinds = new ThreadKinds(ThreadKinds.FLINK_NETWORK,
                    Long.parseLong(config.getString("max.thread.bytes", String.valueOf(1L << 20)).trim()));
        } catch (RuntimeException e) {
            LOG.log(Level.WARNING, "crystalperf: bad max.thread.bytes, using 1 MiB", e);
        }
        analyzePython = config.getString("analyze.python", "").trim();
        pythonPath = config.getString("python.path", "").trim();
        try {
            flushIntervalMs = Long.parseLong(config.getString("flush.interval.ms", "5000"));
        } catch (RuntimeException e) {
            LOG.log(Level.WARNING, "crystalperf: bad flush.interval.ms, using 5000", e);
        }
        double share = CpuBudget.DEFAULT_SHARE;
        try {
            share = Double.parseDouble(config.getString("cpu.budget", String.valueOf(CpuBudget.DEFAULT_SHARE)).trim());
        } catch (RuntimeException e) {
            LOG.log(Level.WARNING, "crystalperf: bad cpu.budget, using " + share, e);
        }
        budget = new CpuBudget(share);
        pace = budget.new Pace(Math.max(1, sampleIntervalMs), (long) (BUCKET_S * 1000));
        if (!"false".equalsIgnoreCase(config.getString("io.counters", "true").trim())) {
            acquireIo();
        }
        if (sampleIntervalMs > 0 || flushIntervalMs > 0) {
            sampler = new Thread(this::sampleLoop, "crystalperf-flink-sampler");
            sampler.setDaemon(true);
            sampler.start();
        }
        try {
            exitHook = new Thread(this::writeOpenJobsAtExit, "crystalperf-flink-exit");
            Runtime.getRuntime().addShutdownHook(exitHook);
        } catch (RuntimeException e) {  // the JVM is exiting already, or hooks are not allowed here
            exitHook = null;
        }
    }

    /**
     * Whether a subtask of the job still has metrics here (call with the lock held): a TaskManager keeps a finished
     * job's own metrics until it releases the job, seconds after its end, and a cluster stopped in between must not
     * make that job look cut; the JobManager's part never runs tasks, the TaskManagers' parts say it.
     */
    private boolean runsTasksHere(Job job) {
        for (Entry e : live.values()) {
            if (e.jobId.equals(job.id) && !e.key.startsWith("\u0001")) {  // a scope with a task name
                return true;
            }
        }
        return false;
    }

    /**
     * The jobs not finished in this process, each marked cut for {@code reason} where a subtask of it still has metrics
     * here and it was not marked before (call with the lock held).
     */
    private List<Job> openJobs(String reason) {
        List<Job> open = new ArrayList<>();
        for (Job job : jobs.values()) {
            if (!finished.contains(job.id)) {
                if (job.cut == null && runsTasksHere(job)) {
                    job.cut = reason;
                }
                open.add(job);
            }
        }
        return open;
    }

    /**
     * The JVM exits with jobs still running here (PyFlink's driver stopped, the cluster shut down without closing its
     * metric registry): their parts are written, marked cut, and their analysis started, by a thread the exit waits
     * for at most {@link #EXIT_WAIT_MS}, so that a reporter stuck on its lock never holds the JVM up.
     */
    private void writeOpenJobsAtExit() {
        Thread writer = new Thread(() -> {
            try {
                List<Job> open;
                synchronized (this) {
                    if (closed) {
                        return;
                    }
                    open = openJobs(CUT_AT_EXIT);
                }
                for (Job job : open) {
                    analyse(job, write(job, true));
                }
            } catch (Throwable t) {  // the exit goes on
                LOG.log(Level.WARNING, "crystalperf: could not write the open jobs' parts at exit", t);
            }
        }, "crystalperf-flink-exit-writer");
        writer.setDaemon(true);
        writer.start();
        try {
            writer.join(EXIT_WAIT_MS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /**
     * The source that names this process's I/O rows: a TaskManager's, a JobManager's, or a local mini
     * cluster (PyFlink, a local environment), where both run in this one JVM.
     */
    static String ioSource(String command) {
        String main = command == null ? "" : command.trim().split("\\s+", 2)[0];
        if (main.contains("TaskManagerRunner") || main.contains("TaskExecutorRunner")) {
            return "taskmanager:" + PROCESS_ID;
        }
        if (main.toLowerCase(java.util.Locale.ROOT).contains("entrypoint")) {
            return "jobmanager:" + PROCESS_ID;
        }
        return "minicluster:" + PROCESS_ID;
    }

    private void acquireIo() {
        try {
            synchronized (CrystalPerfReporter.class) {
                if (ioCounters == null) {
                    ioCounters = new IoCounters(ioSource(System.getProperty("sun.java.command"))).budget(budget).start();
                }
                ioUsers++;
                usesIo = true;
            }
        } catch (Throwable t) {
            LOG.log(Level.WARNING, "crystalperf: the I/O counters did not start (the job is not affected)", t);
        }
    }

    private void releaseIo() {
        IoCounters stopping = null;
        synchronized (CrystalPerfReporter.class) {
            if (usesIo) {
                usesIo = false;
                if (--ioUsers <= 0 && ioCounters != null) {
                    stopping = ioCounters;
                    ioCounters = null;
                    ioUsers = 0;
                }
            }
        }
        if (stopping != null) {
            stopping.cancel();
        }
    }

    private static IoCounters io() {
        synchronized (CrystalPerfReporter.class) {
            return ioCounters;
        }
    }

    /** Rows older than every job this process still knows are of no job's part (bar one before the first). */
    private void forgetOldIoRows() {
        IoCounters counters = io();
        if (counters == null) {
            return;
        }
        double oldest = System.currentTimeMillis() / 1000.0;
        for (Job job : jobs.values()) {
            oldest = Math.min(oldest, job.firstSeen);
        }
        counters.forgetBefore(oldest, IoCounters.DEFAULT_INTERVAL_MS);
    }

    /**
     * The I/O rows of a job's span in this process, with the last row before it and the first after it (a
     * part written as the job ends takes a fresh row for that).
     */
    private static String ioRowsOf(Job job, double end, boolean complete) {
        IoCounters counters = io();
        if (counters == null) {
            return "[]";
        }
        if (complete) {
            counters.sampleOnce();
        }
        List<IoCounters.Row> all = counters.rows();
        List<IoCounters.Row> kept = new ArrayList<>();
        for (int i = 0; i < all.size(); i++) {
            double t = all.get(i).t;
            boolean nextInside = i + 1 < all.size() && all.get(i + 1).t >= job.firstSeen;
            boolean previousInside = i > 0 && all.get(i - 1).t <= end;
            if ((t >= job.firstSeen && t <= end) || (t < job.firstSeen && nextInside)
                    || (t > end && previousInside)) {
                kept.add(all.get(i));
            }
        }
        return IoCounters.toJson(kept);
    }

    private void sampleLoop() {
        ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        long lastFlush = System.currentTimeMillis();
        long flushWaitMs = flushIntervalMs;
        long lastKinds = lastFlush;
        long idleTick = Math.min(flushIntervalMs > 0 ? flushIntervalMs : THREAD_KINDS_INTERVAL_MS,
                THREAD_KINDS_INTERVAL_MS);
        long tick = sampleIntervalMs > 0 ? Math.min(sampleIntervalMs, idleTick) : idleTick;
        while (!closed) {
            try {
                Thread.sleep(tick);
                long cpu = HookCpu.ownThreadNanos();
                if (sampleIntervalMs > 0) {
                    boolean sampled = sampleOnce(mx);
                    tick = Math.min(sampled ? pace.next() : pace.adapt(), idleTick);
                }
                if (System.currentTimeMillis() - lastKinds >= THREAD_KINDS_INTERVAL_MS) {
                    lastKinds = System.currentTimeMillis();
                    refreshKinds();
                }
                cpu = HookCpu.addOwn(HookCpu.SAMPLER, cpu);
                if (flushIntervalMs > 0 && System.currentTimeMillis() - lastFlush >= flushWaitMs) {
                    lastFlush = System.currentTimeMillis();
                    flushOpenJobs();
                    flushWaitMs = flushWaitMs(flushIntervalMs, HookCpu.addOwn(HookCpu.WRITING, cpu) - cpu, budget);
                }
            } catch (InterruptedException e) {
                return;
            } catch (RuntimeException e) {
                LOG.log(Level.WARNING, "crystalperf: stack sampling failed, sampling stops", e);
                return;
            }
        }
    }

    /** Re-reads the threads' CPU times while a job is open here, so a thread that ends keeps what it used. */
    private void refreshKinds() {
        List<HeapPressure.Tracker> heaps = new ArrayList<>();
        synchronized (this) {
            for (Job job : jobs.values()) {
                if (!finished.contains(job.id)) {
                    heaps.add(job.heap);
                }
            }
        }
        if (!heaps.isEmpty()) {
            try {
                threadKinds.refresh();
                for (HeapPressure.Tracker heap : heaps) {
                    heap.poll();
                }
            } catch (RuntimeException e) {
                LOG.log(Level.FINE, "crystalperf: could not read the threads' CPU times or the heap", e);
            }
        }
    }

    /** The process's CPU time per thread kind now; null when unknown (never throws). */
    private long[] kindsNow() {
        try {
            return threadKinds.totals();
        } catch (RuntimeException e) {
            LOG.log(Level.FINE, "crystalperf: could not read the threads' CPU times", e);
            return null;
        }
    }

    /** One round; false when no task thread was there to sample. */
    private boolean sampleOnce(ThreadMXBean mx) {
        long version = taskThreadsVersion;
        long now = System.currentTimeMillis();
        // A task starts its legacy source thread and its fetcher threads after it registered its metrics, so a
        // scan right after the registration misses them: any thread started since the last scan forces another.
        long started = mx.getTotalStartedThreadCount();
        if (version != scannedVersion || started != scannedStarted || now - lastScan >= THREAD_SCAN_INTERVAL_MS) {
            if (!scanTaskThreads(mx)) {
                return false;
            }
            scannedVersion = version;
            scannedStarted = started;
            lastScan = now;
        }
        if (scanIds.length == 0) {
            return false;
        }
        long[] idArray = scanIds;
        List<String[]> owners = scanOwners;
        List<Boolean> legacy = scanLegacy;
        List<String> roles = scanRoles;
        java.util.Set<String[]> withLegacyThread =
                java.util.Collections.newSetFromMap(new java.util.IdentityHashMap<>());
        for (int i = 0; i < idArray.length; i++) {
            if (legacy.get(i)) {
                withLegacyThread.add(owners.get(i));
            }
        }
        ThreadInfo[] infos = HookCpu.stacks(mx, idArray, MAX_STACK_DEPTH, budget == null ? 1 : budget.cores());
        // A task thread (and a fetcher thread) lives for one task attempt, so its CPU time is the task's own.
        long[] cpu = new long[idArray.length];
        for (int i = 0; i < idArray.length; i++) {
            cpu[i] = mx.isThreadCpuTimeSupported() ? mx.getThreadCpuTime(idArray[i]) : -1;
        }
        // The kernel's part of it: where a fresh JVM's heap is first touched, which grows with the subtasks that
        // allocate side by side (the what-ifs scale it); the rest of the process's kernel time does not.
        long[] kernel = null;
        if (now - lastKernelRead >= 1000) {
            lastKernelRead = now;
            kernel = new long[idArray.length];
            for (int i = 0; i < idArray.length; i++) {
                long user = cpu[i] >= 0 ? mx.getThreadUserTime(idArray[i]) : -1;
                kernel[i] = user >= 0 && cpu[i] >= user ? cpu[i] - user : -1;
            }
        }
        long bucket = (long) ((System.currentTimeMillis() / 1000.0 - sampleOrigin) / BUCKET_S);
        // A legacy source's subtask runs on two threads that hand the work to each other (the source thread
        // emits, the task thread runs blocking operators' endInput), one waiting while the other works.
        java.util.Set<String[]> legacyRunning = java.util.Collections.newSetFromMap(new java.util.IdentityHashMap<>());
        for (int i = 0; i < infos.length; i++) {
            if (infos[i] != null && infos[i].getThreadState() == Thread.State.RUNNABLE
                    && withLegacyThread.contains(owners.get(i))) {
                legacyRunning.add(owners.get(i));
            }
        }
        synchronized (this) {
            for (int i = 0; i < infos.length; i++) {
                if (infos[i] == null || infos[i].getStackTrace().length == 0) {
                    continue;
                }
                String[] owner = owners.get(i);
                Job job = jobs.get(owner[0]);
                if (job == null) {
                    continue;
                }
                job.events++;
                String threadKey = owner[1] + "\u0001" + owner[2] + "\u0001" + roles.get(i) + "\u0001" + idArray[i];
                if (cpu[i] >= 0 && (job.threadCpu.containsKey(threadKey) || job.threadCpu.size() < maxScopesPerJob)) {
                    job.threadCpu.merge(threadKey, cpu[i], Math::max);
                    if (kernel != null && kernel[i] >= 0) {
                        job.threadKernel.merge(threadKey, kernel[i], Math::max);
                    }
                }
                if (withLegacyThread.contains(owner) && (legacyRunning.contains(owner)
                        ? infos[i].getThreadState() != Thread.State.RUNNABLE : !legacy.get(i))) {
                    // Only the threads that work count for the subtask (the other only waits for them); when
                    // none works, the source thread's stack says what the subtask waits for.
                    continue;
                }
                if (!embeddedSamplerStarted && sampleIntervalMs > 0
                        && PEMJA_INTERPRETER.equals(infos[i].getStackTrace()[0].getClassName())) {
                    startEmbeddedSampler();
                }
                StringBuilder stack = new StringBuilder();
                for (StackTraceElement el : infos[i].getStackTrace()) {
                    stack.append(el.getClassName()).append('.').append(el.getMethodName()).append('\t')
                            .append(el.getFileName() == null ? "" : el.getFileName()).append('\t')
                            .append(el.getLineNumber()).append('\n');
                }
                // The thread's state is part of the stack's identity: the same frames run or wait.
                String state = infos[i].getThreadState().name().toLowerCase(java.util.Locale.ROOT);
                // A fetcher's samples keep their role: the analysis drops the task thread's waits for them.
                count(job, owner[1] + "\u0001" + owner[2], bucket, state + "\u0001" + roles.get(i), stack.toString());
            }
        }
        return true;
    }

    /**
     * Python functions run in thread mode execute on the task threads, in the CPython pemja embeds in this
     * process, where the JVM's stacks end at pemja's call. Starts crystalperf's Python sampler inside that
     * interpreter (``crystalperf.integrations.flink.pyworkers.start_embedded_sampler``), once an output directory,
     * from a thread of its own: pemja binds an interpreter to the thread that made it, and runs it in the process's
     * one main interpreter (MULTI_THREAD), where the sampler's thread outlives the call. Reflection: pemja is
     * PyFlink's, on the classpath only where Python functions run. A failure costs the samples only (the trace then
     * warns).
     */
    private void startEmbeddedSampler() {
        embeddedSamplerStarted = true;
        if (!EMBEDDED_SAMPLERS.add(outputDir.toAbsolutePath().toString())) {
            return;
        }
        String code = "import sys\n"
                + (pythonPath.isEmpty() ? "" : "if " + pyString(pythonPath) + " not in sys.path: sys.path.append("
                        + pyString(pythonPath) + ")\n")
                + "from crystalperf.integrations.flink.pyworkers import start_embedded_sampler\n"
                + "start_embedded_sampler(" + pyString(outputDir.toAbsolutePath().toString()) + ", "
                + (sampleIntervalMs / 1000.0) + ", " + (budget == null ? "None" : String.valueOf(budget.share())) + ")\n";
        Thread starter = new Thread(() -> {
            try {
                ClassLoader loader = ClassLoader.getSystemClassLoader();
                Class<?> configClass = Class.forName(PEMJA_INTERPRETER + "Config", true, loader);
                Object builder = configClass.getMethod("newBuilder").invoke(null);
                @SuppressWarnings({"unchecked", "rawtypes"})
                Class<Enum> execType = (Class<Enum>) Class.forName(PEMJA_INTERPRETER + "Config$ExecType", true, loader);
                @SuppressWarnings("unchecked")
                Object multiThread = Enum.valueOf(execType, "MULTI_THREAD");
                builder.getClass().getMethod("setExcType", execType).invoke(builder, multiThread);
                Object config = builder.getClass().getMethod("build").invoke(builder);
                Class<?> interpreterClass = Class.forName(PEMJA_INTERPRETER, true, loader);
                Object interpreter = interpreterClass.getConstructor(configClass).newInstance(config);
                try {
                    interpreterClass.getMethod("exec", String.class).invoke(interpreter, code);
                } finally {
                    interpreterClass.getMethod("close").invoke(interpreter);
                }
            } catch (Throwable e) {
                LOG.log(Level.WARNING, "crystalperf: could not sample the Python functions run in the task threads "
                        + "(the job is not affected)", e);
            }
        }, "crystalperf-embedded-python");
        starter.setDaemon(true);
        starter.start();
    }

    /** A Python string literal of ``text``. */
    static String pyString(String text) {
        StringBuilder out = new StringBuilder("'");
        for (char c : text.toCharArray()) {
            if (c == '\\' || c == '\'') {
                out.append('\\').append(c);
            } else if (c < 0x20 || c > 0x7e) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('\'').toString();
    }

    /**
     * Finds the task threads by name (no stacks: cheap, but every thread of the JVM): the subtask threads, the
     * legacy sources' and the FLIP-27 fetchers'. False when no task runs here.
     */
    private boolean scanTaskThreads(ThreadMXBean mx) {
        Map<String, String[]> prefixes;
        synchronized (this) {
            if (taskThreads.isEmpty()) {
                scanIds = new long[0];
                return false;
            }
            prefixes = new HashMap<>(taskThreads);
        }
        List<Long> ids = new ArrayList<>();
        List<String[]> owners = new ArrayList<>();
        List<Boolean> legacy = new ArrayList<>();
        List<String> roles = new ArrayList<>();
        for (ThreadInfo info : mx.getThreadInfo(mx.getAllThreadIds(), 0)) {
            if (info == null) {
                continue;
            }
            String name = info.getThreadName();
            // Legacy sources (SQL datagen, from_collection) run the source and its chained operators here.
            boolean isLegacy = name.startsWith(LEGACY_SOURCE_THREAD);
            boolean isFetcher = !isLegacy && name.startsWith(FETCHER_THREAD);
            if (isLegacy) {
                name = name.substring(LEGACY_SOURCE_THREAD.length());
            } else if (isFetcher) {
                name = name.substring(FETCHER_THREAD.length());
            }
            int paren = name.lastIndexOf(" (");
            int slash = name.indexOf('/', paren + 1);
            if (paren < 0 || slash < 0) {
                continue;
            }
            String[] owner = prefixes.get(name.substring(0, slash + 1));
            if (owner != null) {
                ids.add(info.getThreadId());
                owners.add(owner);
                legacy.add(isLegacy);
                roles.add(isFetcher ? FETCHER_ROLE : "");
            }
        }
        scanIds = ids.stream().mapToLong(Long::longValue).toArray();
        scanOwners = owners;
        scanLegacy = legacy;
        scanRoles = roles;
        return true;
    }

    /** The id of an interned stack; the "[other]" stack's once the byte bound is reached. */
    private int stackId(Job job, String stack) {
        Integer id = job.stackIds.get(stack);
        if (id != null) {
            return id;
        }
        long cost = STACK_BYTES + 2L * stack.length();
        if (job.sampleBytes + cost > maxSampleBytesPerJob && !OTHER_STACK.equals(stack)) {
            job.droppedSamples++;
            return stackId(job, OTHER_STACK);
        }
        id = job.stacks.size();
        job.stacks.add(stack);
        job.stackIds.put(stack, id);
        job.sampleBytes += cost;
        return id;
    }

    /** Counts one sample of a subtask's thread ("task\u0001subtask", "state\u0001role"), bounded in rows and bytes. */
    void count(Job job, String subtask, long bucket, String stateAndRole, String stack) {
        long droppedBefore = job.droppedSamples;
        int id = stackId(job, stack);
        String row = subtask + "\u0001" + bucket + "\u0001" + stateAndRole + "\u0001" + id;
        Long count = job.samples.get(row);
        long cost = ROW_BYTES + 2L * row.length();
        if (count != null) {
            job.samples.put(row, count + 1);
        } else if (job.samples.size() < maxSampleRowsPerJob && job.sampleBytes + cost <= maxSampleBytesPerJob) {
            job.samples.put(row, 1L);
            job.sampleBytes += cost;
        } else {
            if (job.droppedSamples == droppedBefore) {
                job.droppedSamples++;
            }
            String other = subtask + "\u0001" + bucket + "\u0001" + stateAndRole + "\u0001" + stackId(job, OTHER_STACK);
            Long otherCount = job.samples.get(other);
            if (otherCount != null) {
                job.samples.put(other, otherCount + 1);
            } else {
                // one entry per subtask, state and role: written at its latest bucket under "[other]"
                long[] held = job.held.computeIfAbsent(subtask + "\u0001" + stateAndRole, k -> new long[] {0, 0});
                held[0]++;
                held[1] = Math.max(held[1], bucket);
            }
        }
    }

    /**
     * The wait before the next rewrite of the open jobs' parts: the configured interval, longer where the last
     * rewrite ({@code writeNs} of the sampler thread's CPU) would take more than {@link #FLUSH_BUDGET_SHARE} of the
     * hook's CPU budget at that interval, and at most {@link #MAX_FLUSH_WAIT_MS}. Without a budget, the interval.
     */
    static long flushWaitMs(long intervalMs, long writeNs, CpuBudget budget) {
        if (budget == null || !budget.enabled() || writeNs <= 0) {
            return intervalMs;
        }
        double paidMs = writeNs / (FLUSH_BUDGET_SHARE * budget.allowedRate()) / 1e6;
        return Math.max(intervalMs, Math.min(MAX_FLUSH_WAIT_MS, (long) Math.ceil(paidMs)));
    }

    /**
     * Rewrites the part of every job still open in this process. A TaskManager may keep the metrics of
     * a job's last tasks until it releases the job (or shuts down); current counter values of finished
     * tasks are their final values, so the part on disk is complete soon after the job ends.
     */
    private void flushOpenJobs() {
        List<Snapshot> due = new ArrayList<>();
        synchronized (this) {
            for (Job job : jobs.values()) {
                if (!finished.contains(job.id) && job.liveCount > 0 && job.changedSinceWrite()) {
                    job.rewrites++;
                    due.add(snapshot(job, false));
                }
            }
            forgetOldIoRows();
        }
        for (Snapshot snapshot : due) {
            writePart(snapshot);
        }
    }

    @Override
    public synchronized void close() {
        closed = true;
        if (sampler != null) {
            sampler.interrupt();
        }
        if (exitHook != null && Thread.currentThread() != exitHook) {
            try {
                Runtime.getRuntime().removeShutdownHook(exitHook);
            } catch (RuntimeException e) {  // the JVM is exiting: the hook finds the reporter closed
            }
        }
        for (Job job : openJobs(CUT_AT_CLOSE)) {
            analyse(job, write(job, true));
        }
        finished.clear();
        jobs.clear();
        live.clear();
        releaseIo();
    }

    @Override
    public synchronized void notifyOfAddedMetric(Metric metric, String metricName, MetricGroup group) {
        long started = System.nanoTime();
        try {
            Map<String, String> vars = group.getAllVariables();
            String jobId = vars.get("<job_id>");
            if (jobId == null || jobId.isEmpty()) {
                // JobManager/TaskManager-wide metrics say nothing about one job, bar what the cluster offered it
                if (TASK_SLOTS_TOTAL.equals(metricName)) {
                    clusterSlots = metric;
                } else if (REGISTERED_TASK_MANAGERS.equals(metricName)) {
                    clusterTaskManagers = metric;
                }
                return;
            }
            Job job = jobs.get(jobId);
            if (job == null) {
                job = new Job(jobId, kindsNow());
                job.paceAtStart = paceNow();
                jobs.put(jobId, job);
                readCluster(job);
            }
            finished.remove(jobId);
            String jobName = vars.get("<job_name>");
            if (jobName != null) {
                job.name = jobName;
            }
            String scopeKey = String.join("\u0001", nz(vars.get("<task_name>")), nz(vars.get("<operator_name>")),
                    nz(vars.get("<subtask_index>")), nz(vars.get("<task_attempt_num>")));
            if (!job.scopes.containsKey(scopeKey) && job.scopes.size() >= maxScopesPerJob) {
                job.dropped++;
                return;
            }
            if (!job.scopes.containsKey(scopeKey)) {
                Map<String, String> scope = new LinkedHashMap<>();
                for (String var : new String[] {"<task_name>", "<task_id>", "<operator_name>", "<operator_id>",
                        "<subtask_index>", "<task_attempt_num>", "<tm_id>", "<host>"}) {
                    if (vars.containsKey(var)) {
                        scope.put(var.substring(1, var.length() - 1), vars.get(var));
                    }
                }
                job.scopes.put(scopeKey, scope);
                String task = vars.get("<task_name>");
                String subtask = vars.get("<subtask_index>");
                if (task != null && subtask != null) {
                    taskThreads.put(task + " (" + (Integer.parseInt(subtask) + 1) + "/",
                            new String[] {jobId, task, subtask});
                    taskThreadsVersion++;
                }
            }
            double now = System.currentTimeMillis() / 1000.0;
            double[] times = job.scopeTimes.computeIfAbsent(scopeKey, k -> new double[] {now, 0});
            times[1] = 0;  // a metric of the scope is live again
            addClasspath(job, Thread.currentThread().getContextClassLoader());
            live.put(metric, new Entry(jobId, scopeKey + "\u0002" + metricName, metric));
            job.liveCount++;
            job.events++;
        } catch (RuntimeException e) {
            LOG.log(Level.WARNING, "crystalperf: could not track metric " + metricName, e);
        }
        HookCpu.since(HookCpu.CALLBACKS, started);
    }

    @Override
    public void notifyOfRemovedMetric(Metric metric, String metricName, MetricGroup group) {
        long started = System.nanoTime();
        Snapshot ended = null;
        synchronized (this) {
            ended = removeMetric(metric, metricName);
        }
        HookCpu.since(HookCpu.CALLBACKS, started);
        if (ended != null) {
            // rare (a job's end here), and the write waits for the disk: the thread's CPU time, not its wall time
            long cpu = HookCpu.ownThreadNanos();
            Path part = writePart(ended);
            synchronized (this) {
                analyse(ended.job, part);
            }
            HookCpu.addOwn(HookCpu.WRITING, cpu);
        }
    }

    /** Records a removed metric's final value; the snapshot of the job's complete part when it was its last. */
    private Snapshot removeMetric(Metric metric, String metricName) {
        try {
            if (metric == clusterSlots) {
                clusterSlots = null;
            } else if (metric == clusterTaskManagers) {
                clusterTaskManagers = null;
            }
            Entry entry = live.remove(metric);
            if (entry == null) {
                return null;
            }
            Job job = jobs.get(entry.jobId);
            if (job == null) {
                return null;
            }
            Double value = valueOf(entry.metric);
            if (value != null) {
                job.finals.put(entry.key, value);
            }
            job.lastRemoved = System.currentTimeMillis() / 1000.0;
            double[] times = job.scopeTimes.get(entry.key.substring(0, entry.key.indexOf('\u0002')));
            if (times != null) {
                times[1] = job.lastRemoved;
            }
            job.events++;
            if (--job.liveCount <= 0) {
                // A TaskManager of a batch job sees one stage end before the next is deployed: the job
                // stays (bounded) so later stages add to the same part, rewritten as a whole each time.
                Snapshot complete = snapshot(job, true);
                if (taskThreads.values().removeIf(owner -> owner[0].equals(job.id))) {
                    taskThreadsVersion++;
                }
                finished.remove(job.id);
                finished.add(job.id);
                while (finished.size() > MAX_FINISHED_JOBS) {
                    String oldest = finished.iterator().next();
                    finished.remove(oldest);
                    jobs.remove(oldest);
                }
                return complete;
            }
        } catch (RuntimeException e) {
            LOG.log(Level.WARNING, "crystalperf: could not record final value of " + metricName, e);
        }
        return null;
    }

    /** The entries of this JVM's java.class.path, wildcards ("lib/*") expanded to the jars they name. */
    private static List<String> jvmClasspath() {
        List<String> entries = new ArrayList<>();
        for (String entry : System.getProperty("java.class.path", "").split(java.io.File.pathSeparator)) {
            if (entry.isEmpty()) {
                continue;
            }
            if (entry.endsWith("*")) {
                java.io.File[] jars = new java.io.File(entry.substring(0, entry.length() - 1)).listFiles(
                        (dir, name) -> name.endsWith(".jar"));
                if (jars != null) {
                    java.util.Arrays.sort(jars);
                    for (java.io.File jar : jars) {
                        entries.add(jar.getAbsolutePath());
                    }
                }
            } else {
                entries.add(new java.io.File(entry).getAbsolutePath());
            }
        }
        return entries;
    }

    /**
     * Adds the local jars and directories of loader and its parents to the job's classpath. Operator
     * metrics are registered on the task thread, whose context class loader holds the job's own jars
     * (pipeline.jars, user jars) that java.class.path does not name.
     */
    private static void addClasspath(Job job, ClassLoader loader) {
        for (ClassLoader l = loader; l != null && job.seenLoaders.add(l); l = l.getParent()) {
            if (!(l instanceof java.net.URLClassLoader)) {
                continue;
            }
            for (java.net.URL url : ((java.net.URLClassLoader) l).getURLs()) {
                if (job.classpath.size() >= MAX_CLASSPATH_ENTRIES) {
                    return;
                }
                if ("file".equals(url.getProtocol())) {
                    try {
                        job.classpath.add(Paths.get(url.toURI()).toString());
                    } catch (java.net.URISyntaxException | RuntimeException e) {
                        // not a local path: no bytecode to read from it
                    }
                }
            }
        }
    }

    private static String nz(String s) {
        return s == null ? "" : s;
    }

    private static Double valueOf(Metric metric) {
        try {
            if (metric instanceof Counter) {
                return (double) ((Counter) metric).getCount();
            }
            if (metric instanceof Meter) {
                return (double) ((Meter) metric).getCount();
            }
            if (metric instanceof Gauge) {
                Object v = ((Gauge<?>) metric).getValue();
                if (v instanceof Number) {
                    double d = ((Number) v).doubleValue();
                    return Double.isFinite(d) ? d : null;  // legacy sources report busy time as NaN
                }
            }
        } catch (RuntimeException e) {
            // A gauge of an already released task may throw; its value is simply unknown.
        }
        return null;
    }

    /**
     * Starts {@code <python> -m crystalperf.integrations.flink.finish <part>} detached (the command line of
     * the Python side's {@code INTEGRATION.finish_command(part)}), its output appended to a log next to the
     * part: the analysis takes seconds to minutes and must not hold up the task or the cluster.
     */
    private void analyse(Job job, Path part) {
        if (part == null || analyzePython.isEmpty() || !analysed.add(job.id)) {
            return;
        }
        try {
            Path logFile = outputDir.resolve("crystalperf-flink-" + job.id + "." + PROCESS_ID + ".log");
            ProcessBuilder builder = new ProcessBuilder(
                    analyzePython, "-m", FINISH_MODULE, part.toString());
            // The package re-exports finish() from its finish module, so runpy finds that module imported
            // before it runs it as __main__ and warns; running it twice is harmless here.
            builder.environment().merge("PYTHONWARNINGS", "ignore::RuntimeWarning:runpy", (a, b) -> a + "," + b);
            builder.redirectErrorStream(true);
            builder.redirectOutput(ProcessBuilder.Redirect.appendTo(logFile.toFile()));
            builder.redirectInput(ProcessBuilder.Redirect.from(new java.io.File("/dev/null")));
            builder.start();
            LOG.info("crystalperf: analysing job " + job.id + " (log: " + logFile + ")");
        } catch (IOException | RuntimeException e) {
            LOG.log(Level.WARNING, "crystalperf: could not start the analysis of job " + job.id
                    + " with " + analyzePython, e);
        }
    }

    /**
     * What a part holds, copied under the reporter's lock: it is serialised and written outside the lock, so
     * the metric callbacks and the sampler never wait for the disk.
     */
    private static final class Snapshot {
        Job job;
        long sequence;
        boolean complete;
        String id;
        String name;
        double firstSeen;
        double end;
        long processCpuAtStart;
        long[] kindsAtStart;
        long[] faultsAtStart;
        /** The task threads' kernel ns (a part of subtaskCpu's sum). */
        long taskKernel;
        Map<String, Long> subtaskCpu;
        /** The part of subtaskCpu its fetcher threads used, for the subtasks that have them. */
        Map<String, Long> fetcherCpu;
        List<String> classpath;
        long dropped;
        List<Map<String, String>> scopes;
        List<double[]> scopeTimes;
        Map<String, Integer> scopeIndex;
        Map<String, Double> values;
        long droppedSamples;
        List<String> stacks;
        List<Map.Entry<String, Long>> samples;
        List<String> heldRows;
        /** The cluster's registered task slots and TaskManagers (0: unknown). */
        double clusterSlots;
        double clusterTaskManagers;
    }

    /** Raises the job's view of the cluster to what the JobManager's gauges say now (call with the lock held). */
    private void readCluster(Job job) {
        Double slots = clusterSlots == null ? null : valueOf(clusterSlots);
        Double taskManagers = clusterTaskManagers == null ? null : valueOf(clusterTaskManagers);
        if (slots != null && taskManagers != null && slots > 0 && taskManagers > 0) {
            job.clusterSlots = Math.max(job.clusterSlots, slots);
            job.clusterTaskManagers = Math.max(job.clusterTaskManagers, taskManagers);
        }
    }

    /** Copies what the part of job says now (call with the reporter's lock held). */
    private Snapshot snapshot(Job job, boolean complete) {
        job.eventsWritten = job.events;
        Snapshot s = new Snapshot();
        s.job = job;
        s.sequence = ++job.snapshots;
        s.complete = complete;
        s.id = job.id;
        s.name = job.name;
        s.firstSeen = job.firstSeen;
        s.end = job.lastRemoved > 0 ? job.lastRemoved : System.currentTimeMillis() / 1000.0;
        s.processCpuAtStart = job.processCpuAtStart;
        s.kindsAtStart = job.kindsAtStart;
        s.faultsAtStart = job.faultsAtStart;
        // A subtask's threads (a legacy source's two, a FLIP-27 source's fetchers, restarted attempts') add up
        // to its CPU time.
        s.taskKernel = job.threadKernel.values().stream().mapToLong(Long::longValue).sum();
        s.subtaskCpu = new LinkedHashMap<>();
        s.fetcherCpu = new HashMap<>();
        for (Map.Entry<String, Long> e : job.threadCpu.entrySet()) {
            String key = e.getKey();
            int idAt = key.lastIndexOf('\u0001');
            int roleAt = key.lastIndexOf('\u0001', idAt - 1);
            String subtask = key.substring(0, roleAt);
            s.subtaskCpu.merge(subtask, e.getValue(), Long::sum);
            if (FETCHER_ROLE.equals(key.substring(roleAt + 1, idAt))) {
                s.fetcherCpu.merge(subtask, e.getValue(), Long::sum);
            }
        }
        s.classpath = new ArrayList<>(job.classpath);
        s.dropped = job.dropped;
        s.scopes = new ArrayList<>();
        s.scopeTimes = new ArrayList<>();
        s.scopeIndex = new HashMap<>();
        for (Map.Entry<String, Map<String, String>> scope : job.scopes.entrySet()) {
            s.scopeIndex.put(scope.getKey(), s.scopes.size());
            s.scopes.add(scope.getValue());  // never changed once registered
            double[] times = job.scopeTimes.get(scope.getKey());
            s.scopeTimes.add(times == null ? null : times.clone());
        }
        // Metrics still live (job not finished) contribute their current value.
        s.values = new LinkedHashMap<>(job.finals);
        for (Entry e : live.values()) {
            if (e.jobId.equals(job.id) && !s.values.containsKey(e.key)) {
                Double v = valueOf(e.metric);
                if (v != null) {
                    s.values.put(e.key, v);
                }
            }
        }
        s.droppedSamples = job.droppedSamples;
        readCluster(job);
        s.clusterSlots = job.clusterSlots;
        s.clusterTaskManagers = job.clusterTaskManagers;
        s.heldRows = new ArrayList<>();
        if (!job.held.isEmpty()) {
            int other = stackId(job, OTHER_STACK);
            for (Map.Entry<String, long[]> h : job.held.entrySet()) {
                String[] key = h.getKey().split("\u0001", 4);  // task, subtask, state, role
                s.heldRows.add("[" + quote(key[0]) + "," + quote(key[1]) + "," + h.getValue()[1] + "," + other + ","
                        + h.getValue()[0] + "," + quote(key[2]) + "," + quote(key[3]) + "]");
            }
        }
        s.stacks = new ArrayList<>(job.stacks);
        s.samples = new ArrayList<>(job.samples.entrySet().size());
        for (Map.Entry<String, Long> row : job.samples.entrySet()) {
            s.samples.add(new java.util.AbstractMap.SimpleImmutableEntry<>(row.getKey(), row.getValue()));
        }
        return s;
    }

    /** The part's JSON (format version 11; see the Python reader for what each version added). */
    private String render(Snapshot s) {
        StringBuilder w = new StringBuilder(4096 + 64 * s.samples.size());
        w.append("{\"format\":\"crystalperf-flink-metrics\",\"version\":11,\"job_id\":").append(quote(s.id));
        w.append(",\"job_name\":").append(quote(s.name));
        w.append(",\"process\":").append(PROCESS_ID);
        // complete: none of the job's metrics is left in this process; a flushed part is not
        w.append(",\"complete\":").append(s.complete).append(",\"written\":").append(System.currentTimeMillis() / 1000.0);
        w.append(",\"start\":").append(s.firstSeen).append(",\"end\":").append(s.end);
        // version 10: why the part was written before the job ended, if it was
        String cutBy = s.job.cut;
        if (cutBy != null) {
            w.append(",\"cut\":").append(quote(cutBy));
        }
        // version 10: how the job ended, where JobStatusRecorder saw it (the JobManager's process)
        String[] status = JobStatusRecorder.statusOf(s.id);
        if (status != null) {
            w.append(",\"status\":").append(quote(status[0]));
            if (!status[1].isEmpty()) {
                w.append(",\"failure\":").append(quote(status[1]));
            }
        }
        // version 3: this process's I/O counter rows over the job (the trace's io)
        w.append(",\"io\":").append(ioRowsOf(s.job, s.end, s.complete));
        long processCpu = HookCpu.processNanos();
        long[] kinds = s.kindsAtStart == null ? null : kindsNow();
        if (processCpu >= 0 && s.processCpuAtStart >= 0) {
            w.append(",\"process_cpu_s\":").append((processCpu - s.processCpuAtStart) / 1e9);
            if (kinds != null) {
                w.append(",\"thread_kinds_cpu_s\":").append(kindsJson(processCpu - s.processCpuAtStart, s, kinds));
            }
        }
        // version 11: the process's page faults served from memory and its kernel time over the job, and its task
        // threads' kernel time
        long[] faults = s.faultsAtStart == null ? null : ThreadKinds.processFaults();
        if (faults != null) {
            w.append(",\"process_faults\":[").append(Math.max(0, faults[0] - s.faultsAtStart[0])).append(',')
                    .append(Math.max(0, faults[1] - s.faultsAtStart[1]) / 1e9).append(',')
                    .append(s.taskKernel / 1e9).append(']');
        }
        w.append(",\"cpu_count\":").append(Runtime.getRuntime().availableProcessors());
        if (s.clusterSlots > 0 && s.clusterTaskManagers > 0) {
            // version 8: the JobManager's view of the cluster when the part was written
            w.append(",\"cluster\":{\"task_slots\":").append(Math.round(s.clusterSlots))
                    .append(",\"taskmanagers\":").append(Math.round(s.clusterTaskManagers)).append('}');
        }
        // version 6: what the hook cost in this process since the reporter opened (the whole process's hook: the
        // reporters of a JVM share its sampler budget and its I/O counters)
        w.append(",\"hook\":").append(hookJson(s.job, processCpu));
        w.append(",\"collector\":").append(collectorJson());
        // version 9: how full the heap was of live data, and the collections, while the job ran
        w.append(",\"heap\":").append(s.job.heap.json());
        w.append(",\"thread_cpu\":[");
        int t = 0;
        for (Map.Entry<String, Long> e : s.subtaskCpu.entrySet()) {
            String[] key = e.getKey().split("\u0001", 2);
            w.append(t++ > 0 ? "," : "").append('[').append(quote(key[0])).append(',').append(quote(key[1]))
                    .append(',').append(e.getValue() / 1e9);
            // version 7: a FLIP-27 source's fetcher threads run beside its task thread, so the subtask's CPU time
            // is not one thread's: their part of it
            Long fetcher = s.fetcherCpu.get(e.getKey());
            if (fetcher != null) {
                w.append(',').append(fetcher / 1e9);
            }
            w.append(']');
        }
        w.append("],\"classpath\":[");
        int c = 0;
        for (String entry : s.classpath) {
            w.append(c++ > 0 ? "," : "").append(quote(entry));
        }
        w.append("],\"dropped_metrics\":").append(s.dropped).append(",\"scopes\":[");
        for (int i = 0; i < s.scopes.size(); i++) {
            w.append(i > 0 ? ",{" : "{");
            int j = 0;
            for (Map.Entry<String, String> kv : s.scopes.get(i).entrySet()) {
                w.append(j++ > 0 ? "," : "").append(quote(kv.getKey())).append(':').append(quote(kv.getValue()));
            }
            double[] times = s.scopeTimes.get(i);
            if (times != null) {
                w.append(j > 0 ? "," : "").append("\"added\":").append(times[0]);
                if (times[1] > 0) {
                    w.append(",\"removed\":").append(times[1]);
                }
            }
            w.append('}');
        }
        w.append("],\"metrics\":[");
        int k = 0;
        for (Map.Entry<String, Double> m : s.values.entrySet()) {
            int cut = m.getKey().indexOf('\u0002');
            Integer scope = s.scopeIndex.get(m.getKey().substring(0, cut));
            if (scope == null) {
                continue;
            }
            w.append(k++ > 0 ? "," : "").append('[').append(scope).append(',')
                    .append(quote(m.getKey().substring(cut + 1))).append(',').append(m.getValue()).append(']');
        }
        w.append("],\"sample_interval_s\":").append(sampleIntervalMs / 1000.0).append(",\"sample_origin\":")
                .append(sampleOrigin).append(",\"sample_bucket_s\":").append(BUCKET_S)
                .append(",\"dropped_samples\":").append(s.droppedSamples).append(",\"stacks\":[");
        for (int i = 0; i < s.stacks.size(); i++) {
            w.append(i > 0 ? "," : "").append(quote(s.stacks.get(i)));
        }
        w.append("],\"samples\":[");
        int n = 0;
        for (Map.Entry<String, Long> row : s.samples) {
            // task, subtask, bucket, state, role, stack id
            String[] parts = row.getKey().split("\u0001", 6);
            w.append(n++ > 0 ? "," : "").append('[').append(quote(parts[0])).append(',').append(quote(parts[1]))
                    .append(',').append(parts[2]).append(',').append(parts[5]).append(',').append(row.getValue())
                    .append(',').append(quote(parts[3])).append(',').append(quote(parts[4])).append(']');
        }
        for (String held : s.heldRows) {
            w.append(n++ > 0 ? "," : "").append(held);
        }
        w.append("]}\n");
        return w.toString();
    }

    /**
     * The process's CPU time over the job by thread kind (version 5), seconds: "task" the job's subtask threads
     * here, the kinds {@link ThreadKinds} measures (their time since the job was first seen), and "other" what is
     * left of the process's time.
     */
    static String kindsJson(long processNanos, Snapshot s, long[] kindsNow) {
        long task = 0;
        for (long ns : s.subtaskCpu.values()) {
            task += ns;
        }
        StringBuilder w = new StringBuilder("{");
        for (Map.Entry<String, Double> kind
                : ThreadKinds.split(task, ThreadKinds.since(kindsNow, s.kindsAtStart), processNanos).entrySet()) {
            w.append(w.length() > 1 ? "," : "").append('"').append(kind.getKey()).append("\":")
                    .append(kind.getValue().doubleValue());
        }
        return w.append('}').toString();
    }

    /** Sampling rounds taken and planned, budget windows measured and over budget, so far. */
    private long[] paceNow() {
        long[] w = budget == null ? new long[2] : budget.windows();
        return pace == null ? new long[] {0, 0, w[0], w[1]} : new long[] {pace.taken(), pace.planned(), w[0], w[1]};
    }

    /**
     * The part's {@code hook} (version 6): what the hook cost in this process over the job's span here (its CPU
     * seconds by part, the process's, the budget, the sampling rounds it took and would have taken).
     */
    private String hookJson(Job job, long processNanos) {
        long[] p = paceNow();
        StringBuilder b = new StringBuilder("{\"source\":").append(quote(ioSource(System.getProperty("sun.java.command"))))
                .append(",\"host\":").append(quote(IoCounters.hostname()))
                .append(",\"parts\":").append(HookCpu.partsJson(HookCpu.parts(), job.hookAtStart));
        if (processNanos >= 0 && job.processCpuAtStart >= 0) {
            b.append(",\"process_cpu_s\":").append((processNanos - job.processCpuAtStart) / 1e9);
        }
        if (budget != null) {
            b.append(",\"cores\":").append(budget.cores()).append(",\"budget_share\":").append(budget.share());
        }
        long taken = p[0] - job.paceAtStart[0];
        return b.append(",\"samples_taken\":").append(taken)
                .append(",\"samples_planned\":").append(Math.max(taken, p[1] - job.paceAtStart[1]))
                .append(",\"windows\":").append(p[2] - job.paceAtStart[2])
                .append(",\"windows_over_budget\":").append(p[3] - job.paceAtStart[3])
                .append(",\"rewrites\":").append(job.rewrites).append('}').toString();
    }

    /** Command-line options that choose the garbage collector (the JVM's ergonomics then stay out of it). */
    private static final String[] COLLECTOR_OPTIONS = {"-XX:+UseSerialGC", "-XX:+UseParallelGC", "-XX:+UseG1GC",
        "-XX:+UseZGC", "-XX:+UseShenandoahGC", "-XX:+UseConcMarkSweepGC", "-XX:+UseEpsilonGC"};

    /**
     * Which garbage collector this JVM runs (version 5, optional): the names of its collector beans ("G1 Young
     * Generation", "Copy"...) and the option that chose it, null where the JVM's ergonomics did (which pick the
     * serial collector on fewer than two processors). A what-if on fewer CPUs needs both to know whether the
     * collector, and the work it does, would change.
     */
    static String collectorJson() {
        StringBuilder w = new StringBuilder("{\"names\":[");
        String chosen = null;
        try {
            int i = 0;
            for (java.lang.management.GarbageCollectorMXBean bean : ManagementFactory.getGarbageCollectorMXBeans()) {
                w.append(i++ > 0 ? "," : "").append(quote(bean.getName()));
            }
            for (String argument : ManagementFactory.getRuntimeMXBean().getInputArguments()) {
                for (String option : COLLECTOR_OPTIONS) {
                    if (argument.equals(option)) {
                        chosen = option;  // the last one given wins, as in the JVM
                    }
                }
            }
        } catch (RuntimeException | LinkageError e) {
            LOG.log(Level.FINE, "crystalperf: no garbage collector names", e);
        }
        return w.append("],\"option\":").append(chosen == null ? "null" : quote(chosen)).append('}').toString();
    }

    /** Snapshot under the lock, then serialise and write outside it (callers hold no lock for the write). */
    private Path write(Job job, boolean complete) {
        Snapshot snapshot;
        synchronized (this) {
            snapshot = snapshot(job, complete);
        }
        return writePart(snapshot);
    }

    /**
     * Writes a part atomically: a fresh temporary file beside it (a unique name, so two writers never share one
     * and a planted link is never followed), forced to the disk, then renamed over the part; the temporary file is
     * removed when anything fails. An older snapshot never replaces a newer one's part.
     */
    private Path writePart(Snapshot s) {
        synchronized (s.job.writeLock) {
            if (s.sequence < s.job.writtenSequence) {
                return null;
            }
            Path tmp = null;
            try {
                byte[] bytes = render(s).getBytes(StandardCharsets.UTF_8);
                Files.createDirectories(outputDir);
                // One part per process: on a cluster the JobManager and every TaskManager write their own.
                String part = "crystalperf-flink-" + s.id + "." + PROCESS_ID;
                Path target = outputDir.resolve(part + ".json");
                tmp = Files.createTempFile(outputDir, ".crystalperf-" + part + ".json.", ".tmp");
                try {
                    Files.setPosixFilePermissions(tmp, java.nio.file.attribute.PosixFilePermissions.fromString("rw-r--r--"));
                } catch (UnsupportedOperationException | IOException e) {
                    // not a POSIX file system: the temporary file's own permissions stay
                }
                try (FileChannel channel = FileChannel.open(tmp, StandardOpenOption.WRITE)) {
                    ByteBuffer buffer = ByteBuffer.wrap(bytes);
                    while (buffer.hasRemaining()) {
                        channel.write(buffer);
                    }
                    channel.force(true);
                }
                Files.move(tmp, target, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
                tmp = null;
                s.job.writtenSequence = s.sequence;
                LOG.info("crystalperf: wrote " + target);
                return target;
            } catch (IOException | RuntimeException e) {
                LOG.log(Level.WARNING, "crystalperf: could not write the metrics of job " + s.id, e);
                return null;
            } finally {
                if (tmp != null) {
                    try {
                        Files.deleteIfExists(tmp);
                    } catch (IOException e) {
                        LOG.log(Level.FINE, "crystalperf: could not remove " + tmp, e);
                    }
                }
            }
        }
    }

    private static String quote(String s) {
        return IoCounters.quote(s);
    }
}
