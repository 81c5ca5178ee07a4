package org.crystalperf.flink;

import java.io.IOException;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
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
import org.crystalperf.common.IoCounters;

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
 * job's span, with one row before and one after (part format version 3).
 */
public class CrystalPerfReporter implements MetricReporter {
    private static final Logger LOG = Logger.getLogger(CrystalPerfReporter.class.getName());
    /** Bounds memory on jobs with very many subtasks; metrics beyond it are dropped and counted. */
    private int maxScopesPerJob = 200_000;

    private final Map<String, Job> jobs = new HashMap<>();
    /** Jobs whose metrics are all gone, oldest first; kept in case a later stage of the job comes back. */
    private final java.util.LinkedHashSet<String> finished = new java.util.LinkedHashSet<>();
    private static final int MAX_FINISHED_JOBS = 16;
    private final Map<Metric, Entry> live = new HashMap<>();
    private Path outputDir = Paths.get(".");
    /** Aggregated stack samples are bounded per job; samples beyond the bound are counted as dropped. */
    private int maxSampleRowsPerJob = 50_000;
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
    /** The Python module that finishes a job (crystalperf.integrations.flink.finish, run with -m). */
    private static final String FINISH_MODULE = "crystalperf.integrations.flink.finish";
    /** Python interpreter with crystalperf that analyses a job's parts once it ended here (empty: none). */
    private String analyzePython = "";
    /** Jobs whose analysis this process started, so a job is analysed once per process. */
    private final java.util.Set<String> analysed = new java.util.HashSet<>();
    private double sampleOrigin = System.currentTimeMillis() / 1000.0;
    /** Thread-name prefix "task_name (subtask+1/" of every live task -> its job and subtask. */
    private final Map<String, String[]> taskThreads = new HashMap<>();
    private Thread sampler;
    private volatile boolean closed;
    /** This process's I/O counters, shared by the reporters of the JVM (one sampler a process). */
    private static IoCounters ioCounters;
    private static int ioUsers;
    private boolean usesIo;

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
        final Map<String, Map<String, String>> scopes = new LinkedHashMap<>();
        final Map<String, Double> finals = new LinkedHashMap<>();
        int liveCount;
        long dropped;
        final Map<String, Long> samples = new HashMap<>();
        long droppedSamples;
        final double firstSeen = System.currentTimeMillis() / 1000.0;
        /** CPU time of this whole process when the job was first seen (ns, -1 when unknown). */
        final long processCpuAtStart = processCpuNanos();
        /** Latest CPU time (ns) of each thread of a subtask, "task_name\u0001subtask\u0001thread id" -> ns, seen by
         * the sampler: a legacy source's subtask runs on two threads (the task's and the source's), a FLIP-27
         * source's on its task thread and its fetcher threads. */
        final Map<String, Long> threadCpu = new HashMap<>();
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
        boolean changedSinceWrite() {
            return events != eventsWritten;
        }
        Job(String id) {
            this.id = id;
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
        } catch (RuntimeException e) {
            LOG.log(Level.WARNING, "crystalperf: bad reporter configuration, using the working directory", e);
        }
        analyzePython = config.getString("analyze.python", "").trim();
        try {
            flushIntervalMs = Long.parseLong(config.getString("flush.interval.ms", "5000"));
        } catch (RuntimeException e) {
            LOG.log(Level.WARNING, "crystalperf: bad flush.interval.ms, using 5000", e);
        }
        if (!"false".equalsIgnoreCase(config.getString("io.counters", "true").trim())) {
            acquireIo();
        }
        if (sampleIntervalMs > 0 || flushIntervalMs > 0) {
            sampler = new Thread(this::sampleLoop, "crystalperf-flink-sampler");
            sampler.setDaemon(true);
            sampler.start();
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
                    ioCounters = new IoCounters(ioSource(System.getProperty("sun.java.command"))).start();
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
        long tick = sampleIntervalMs > 0 ? sampleIntervalMs : flushIntervalMs;
        while (!closed) {
            try {
                Thread.sleep(tick);
                if (sampleIntervalMs > 0) {
                    sampleOnce(mx);
                }
                if (flushIntervalMs > 0 && System.currentTimeMillis() - lastFlush >= flushIntervalMs) {
                    lastFlush = System.currentTimeMillis();
                    flushOpenJobs();
                }
            } catch (InterruptedException e) {
                return;
            } catch (RuntimeException e) {
                LOG.log(Level.WARNING, "crystalperf: stack sampling failed, sampling stops", e);
                return;
            }
        }
    }

    private void sampleOnce(ThreadMXBean mx) {
        Map<String, String[]> prefixes;
        synchronized (this) {
            if (taskThreads.isEmpty()) {
                return;
            }
            prefixes = new HashMap<>(taskThreads);
        }
        // Names first (no stacks: cheap), then stacks of the task threads only, which pauses them less.
        List<Long> ids = new ArrayList<>();
        List<String[]> owners = new ArrayList<>();
        List<Boolean> legacy = new ArrayList<>();
        List<String> roles = new ArrayList<>();
        java.util.Set<String[]> withLegacyThread =
                java.util.Collections.newSetFromMap(new java.util.IdentityHashMap<>());
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
                if (isLegacy) {
                    withLegacyThread.add(owner);
                }
            }
        }
        if (ids.isEmpty()) {
            return;
        }
        long[] idArray = ids.stream().mapToLong(Long::longValue).toArray();
        ThreadInfo[] infos = mx.getThreadInfo(idArray, MAX_STACK_DEPTH);
        // A task thread (and a fetcher thread) lives for one task attempt, so its CPU time is the task's own.
        long[] cpu = new long[idArray.length];
        for (int i = 0; i < idArray.length; i++) {
            cpu[i] = mx.isThreadCpuTimeSupported() ? mx.getThreadCpuTime(idArray[i]) : -1;
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
                String threadKey = owner[1] + "\u0001" + owner[2] + "\u0001" + idArray[i];
                if (cpu[i] >= 0 && (job.threadCpu.containsKey(threadKey) || job.threadCpu.size() < maxScopesPerJob)) {
                    job.threadCpu.merge(threadKey, cpu[i], Math::max);
                }
                if (withLegacyThread.contains(owner) && (legacyRunning.contains(owner)
                        ? infos[i].getThreadState() != Thread.State.RUNNABLE : !legacy.get(i))) {
                    // Only the threads that work count for the subtask (the other only waits for them); when
                    // none works, the source thread's stack says what the subtask waits for.
                    continue;
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
                String row = owner[1] + "\u0001" + owner[2] + "\u0001" + bucket + "\u0001" + state + "\u0001"
                        + roles.get(i) + "\u0001" + stack;
                Long count = job.samples.get(row);
                if (count != null) {
                    job.samples.put(row, count + 1);
                } else if (job.samples.size() < maxSampleRowsPerJob) {
                    job.samples.put(row, 1L);
                } else {
                    job.droppedSamples++;
                }
            }
        }
    }

    /**
     * Rewrites the part of every job still open in this process. A TaskManager may keep the metrics of
     * a job's last tasks until it releases the job (or shuts down); current counter values of finished
     * tasks are their final values, so the part on disk is complete soon after the job ends.
     */
    private synchronized void flushOpenJobs() {
        for (Job job : jobs.values()) {
            if (!finished.contains(job.id) && job.liveCount > 0 && job.changedSinceWrite()) {
                write(job, false);
            }
        }
        forgetOldIoRows();
    }

    @Override
    public synchronized void close() {
        closed = true;
        if (sampler != null) {
            sampler.interrupt();
        }
        for (Job job : jobs.values()) {
            if (!finished.contains(job.id)) {
                analyse(job, write(job, true));
            }
        }
        finished.clear();
        jobs.clear();
        live.clear();
        releaseIo();
    }

    @Override
    public synchronized void notifyOfAddedMetric(Metric metric, String metricName, MetricGroup group) {
        try {
            Map<String, String> vars = group.getAllVariables();
            String jobId = vars.get("<job_id>");
            if (jobId == null || jobId.isEmpty()) {
                return;  // JobManager/TaskManager-wide metrics say nothing about one job
            }
            Job job = jobs.computeIfAbsent(jobId, Job::new);
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
    }

    @Override
    public synchronized void notifyOfRemovedMetric(Metric metric, String metricName, MetricGroup group) {
        try {
            Entry entry = live.remove(metric);
            if (entry == null) {
                return;
            }
            Job job = jobs.get(entry.jobId);
            if (job == null) {
                return;
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
                Path part = write(job, true);
                analyse(job, part);
                taskThreads.values().removeIf(owner -> owner[0].equals(job.id));
                finished.remove(job.id);
                finished.add(job.id);
                while (finished.size() > MAX_FINISHED_JOBS) {
                    String oldest = finished.iterator().next();
                    finished.remove(oldest);
                    jobs.remove(oldest);
                }
            }
        } catch (RuntimeException e) {
            LOG.log(Level.WARNING, "crystalperf: could not record final value of " + metricName, e);
        }
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

    /** CPU time of this JVM (all threads), or -1 where the JVM does not expose it. */
    private static long processCpuNanos() {
        try {
            java.lang.management.OperatingSystemMXBean os = ManagementFactory.getOperatingSystemMXBean();
            if (os instanceof com.sun.management.OperatingSystemMXBean) {
                return ((com.sun.management.OperatingSystemMXBean) os).getProcessCpuTime();
            }
        } catch (RuntimeException | LinkageError e) {
            LOG.log(Level.FINE, "crystalperf: no process CPU time", e);
        }
        return -1;
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

    private Path write(Job job, boolean complete) {
        job.eventsWritten = job.events;
        try {
            Files.createDirectories(outputDir);
            // One part per process: on a cluster the JobManager and every TaskManager write their own.
            String part = "crystalperf-flink-" + job.id + "." + PROCESS_ID;
            Path target = outputDir.resolve(part + ".json");
            Path tmp = outputDir.resolve(part + ".json.tmp");
            try (Writer w = Files.newBufferedWriter(tmp, StandardCharsets.UTF_8)) {
                w.write("{\"format\":\"crystalperf-flink-metrics\",\"version\":3,\"job_id\":");
                w.write(quote(job.id));
                w.write(",\"job_name\":" + quote(job.name));
                w.write(",\"process\":" + PROCESS_ID);
                // complete: none of the job's metrics is left in this process; a flushed part is not
                w.write(",\"complete\":" + complete + ",\"written\":" + System.currentTimeMillis() / 1000.0);
                double end = job.lastRemoved > 0 ? job.lastRemoved : System.currentTimeMillis() / 1000.0;
                w.write(",\"start\":" + job.firstSeen + ",\"end\":" + end);
                // version 3: this process's I/O counter rows over the job (the trace's io)
                w.write(",\"io\":" + ioRowsOf(job, end, complete));
                long processCpu = processCpuNanos();
                if (processCpu >= 0 && job.processCpuAtStart >= 0) {
                    w.write(",\"process_cpu_s\":" + (processCpu - job.processCpuAtStart) / 1e9);
                }
                w.write(",\"cpu_count\":" + Runtime.getRuntime().availableProcessors());
                w.write(",\"thread_cpu\":[");
                // A subtask's threads (a legacy source's two, a FLIP-27 source's fetchers, restarted attempts')
                // add up to its CPU time.
                Map<String, Long> subtaskCpu = new LinkedHashMap<>();
                for (Map.Entry<String, Long> e : job.threadCpu.entrySet()) {
                    subtaskCpu.merge(e.getKey().substring(0, e.getKey().lastIndexOf('\u0001')), e.getValue(), Long::sum);
                }
                int t = 0;
                for (Map.Entry<String, Long> e : subtaskCpu.entrySet()) {
                    String[] key = e.getKey().split("\u0001", 2);
                    w.write((t++ > 0 ? "," : "") + "[" + quote(key[0]) + "," + quote(key[1]) + "," + e.getValue() / 1e9 + "]");
                }
                w.write("],\"classpath\":[");
                int c = 0;
                for (String entry : job.classpath) {
                    w.write((c++ > 0 ? "," : "") + quote(entry));
                }
                w.write("]");
                w.write(",\"dropped_metrics\":" + job.dropped + ",\"scopes\":[");
                Map<String, Integer> index = new HashMap<>();
                int i = 0;
                for (Map.Entry<String, Map<String, String>> scope : job.scopes.entrySet()) {
                    if (i > 0) {
                        w.write(",");
                    }
                    index.put(scope.getKey(), i++);
                    w.write("{");
                    int j = 0;
                    for (Map.Entry<String, String> kv : scope.getValue().entrySet()) {
                        w.write((j++ > 0 ? "," : "") + quote(kv.getKey()) + ":" + quote(kv.getValue()));
                    }
                    double[] times = job.scopeTimes.get(scope.getKey());
                    if (times != null) {
                        w.write((j++ > 0 ? "," : "") + "\"added\":" + times[0]);
                        if (times[1] > 0) {
                            w.write(",\"removed\":" + times[1]);
                        }
                    }
                    w.write("}");
                }
                w.write("],\"metrics\":[");
                int k = 0;
                // Metrics still live at close() (job not finished) contribute their current value.
                Map<String, Double> values = new LinkedHashMap<>(job.finals);
                for (Entry e : live.values()) {
                    if (e.jobId.equals(job.id) && !values.containsKey(e.key)) {
                        Double v = valueOf(e.metric);
                        if (v != null) {
                            values.put(e.key, v);
                        }
                    }
                }
                for (Map.Entry<String, Double> m : values.entrySet()) {
                    int cut = m.getKey().indexOf('\u0002');
                    Integer scope = index.get(m.getKey().substring(0, cut));
                    if (scope == null) {
                        continue;
                    }
                    w.write((k++ > 0 ? "," : "") + "[" + scope + "," + quote(m.getKey().substring(cut + 1)) + ","
                            + m.getValue() + "]");
                }
                w.write("],\"sample_interval_s\":" + (sampleIntervalMs / 1000.0) + ",\"sample_origin\":" + sampleOrigin
                        + ",\"sample_bucket_s\":" + BUCKET_S + ",\"dropped_samples\":" + job.droppedSamples
                        + ",\"samples\":[");
                int n = 0;
                for (Map.Entry<String, Long> row : job.samples.entrySet()) {
                    String[] parts = row.getKey().split("\u0001", 6);
                    w.write((n++ > 0 ? "," : "") + "[" + quote(parts[0]) + "," + quote(parts[1]) + "," + parts[2] + ","
                            + quote(parts[5]) + "," + row.getValue() + "," + quote(parts[3]) + "," + quote(parts[4])
                            + "]");
                }
                w.write("]}\n");
            }
            Files.move(tmp, target, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
            LOG.info("crystalperf: wrote " + target);
            return target;
        } catch (IOException | RuntimeException e) {
            LOG.log(Level.WARNING, "crystalperf: could not write the metrics of job " + job.id, e);
            return null;
        }
    }

    private static String quote(String s) {
        return IoCounters.quote(s);
    }
}
