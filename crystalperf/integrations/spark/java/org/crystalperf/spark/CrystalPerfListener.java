package org.crystalperf.spark;

import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.net.URI;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.logging.Level;
import java.util.logging.Logger;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.zip.GZIPOutputStream;

import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.spark.SparkConf;
import org.apache.spark.executor.TaskMetrics;
import org.apache.spark.scheduler.*;
import org.apache.spark.storage.RDDInfo;
import org.crystalperf.common.CpuBudget;
import org.crystalperf.common.HookCpu;
import org.crystalperf.common.IoCounters;
import org.crystalperf.common.ThreadKinds;
import scala.Option;
import scala.Tuple2;
import scala.jdk.javaapi.CollectionConverters;

/**
 * {@code spark.extraListeners=org.crystalperf.spark.CrystalPerfListener}: records the application's
 * DAG (jobs, stages with their parents, tasks with all their metrics) and, when the application ends,
 * writes {@code crystalperf-trace.json.gz} (the trace schema) and runs the analysis in a separate Python
 * process. Nothing here may fail the application: every callback swallows and logs its own errors.
 */
public class CrystalPerfListener extends SparkListener {
    static final Logger LOG = Logger.getLogger("crystalperf");
    static final String VERSION = "0.1";
    /**
     * The trace schema version written when {@code spark.crystalperf.schemaVersion} is absent (a listener
     * configured by hand); crystalperf's {@code spark_conf} sets it to the version its Python side reads.
     * A unit test keeps this equal to {@code crystalperf.core.trace.SCHEMA_VERSION}.
     */
    static final String SCHEMA_VERSION = "1.13";
    /** The operation id of the samples of the driver's own work (crystalperf.core.trace.DRIVER_OPERATION). */
    static final String DRIVER_OPERATION = "(driver)";
    /** Their thread role: the driver JVM's threads serving the application's calls. */
    static final String DRIVER_JVM_THREAD = "jvm-driver";
    private static final Pattern WRITE_PATH =
            Pattern.compile(
            "InsertIntoHadoopFsRelationCommand\\s*(?:\\nInput: [^\\n]*\\nArguments:)?\\s+(?:file:(?://)?)?(/[^,\\s\\]]+)");

    private final SparkConf conf;
    private final boolean testing = "1".equals(System.getenv("CRYSTALPERF_TESTING"));

    private String appId = "unknown";
    private String appName = "";
    private String appAttempt;
    private String user;
    private double appStart = System.currentTimeMillis() / 1000.0;
    private final Map<Integer, Map<String, Object>> jobs = new TreeMap<>();
    private final Map<Integer, List<Integer>> jobStages = new HashMap<>();
    private final Map<Integer, StageMeta> stageInfos = new HashMap<>();
    private final Map<Integer, Map<String, Object>> stages = new TreeMap<>();
    private final TaskTable tasks;
    private final Map<String, Map<String, Object>> executors = new TreeMap<>();
    /** The CPU ns of the tasks each executor ran, exact whatever the task table keeps (one entry per executor). */
    private final Map<String, long[]> taskCpuByExecutor = new HashMap<>();
    private final Map<Integer, Long> cachedBytes = new HashMap<>();
    private final List<String> warnings = new ArrayList<>();
    private long warningsLeftOut;
    private final List<String> classpath = new ArrayList<>();
    private final Map<String, String> properties = new TreeMap<>();
    private final Map<String, String> sqlDescriptions = new HashMap<>();
    /** A streaming micro-batch's trigger ("query id/batch id"): when it fired and how long it ran, in seconds. */
    private final Map<String, double[]> streamingTriggers = new HashMap<>();
    private final SqlPlans sqlPlans = new SqlPlans();
    private String lastOutputDir;
    /** The shared directory holding this application's own output directory, when outputDir was not set. */
    private volatile File sharedOutputDir;
    private boolean finished;
    /** A job failed while the JVM was shutting down: Spark's shutdown hook stopped it. */
    private boolean cutByShutdown;
    /** The last trace written (for a shutdown that comes after the application's end). */
    private volatile File writtenTrace;
    private final Thread shutdownHook;

    static final int MAX_WARNINGS = 200;
    static final int MAX_SQL_DESCRIPTIONS = 10_000;
    static final int MAX_STREAMING_TRIGGERS = 100_000;
    static final int MAX_TEXT = 2000;
    static final String PARTIAL_SHUTDOWN =
            "the driver was stopped before the application ended (SIGTERM or System.exit)";
    static final String PARTIAL_STOPPED_IN_SHUTDOWN =
            "the driver was stopped before the application ended (SIGTERM or System.exit); the application's end "
            + "came from Spark's own shutdown hook";

    /** What the trace needs of a stage's StageInfo (StageInfo itself holds its accumulables and metrics). */
    static final class StageMeta {
        final String name;
        final int numTasks;
        final int[] parentIds;
        final String details;
        final String lineage;

        StageMeta(StageInfo si) {
            name = clip(si.name());
            numTasks = si.numTasks();
            List<Object> ps = CollectionConverters.asJava(si.parentIds());
            parentIds = new int[ps.size()];
            for (int i = 0; i < parentIds.length; i++) {
                parentIds[i] = (Integer) ps.get(i);
            }
            String d = si.details();
            details = d == null || d.isEmpty() ? null : clip(d.split("\n", 2)[0].trim());
            StringBuilder sb = new StringBuilder();
            for (RDDInfo rdd : CollectionConverters.asJava(si.rddInfos())) {
                if (sb.length() > 0) {
                    sb.append("; ");
                }
                sb.append(rdd.id()).append(' ').append(rdd.name()).append(" @ ").append(rdd.callSite());
                List<Object> rp = CollectionConverters.asJava(rdd.parentIds());
                if (!rp.isEmpty()) {
                    sb.append(" <- ").append(rp);
                }
                if (sb.length() > 4 * MAX_TEXT) {
                    break;
                }
            }
            lineage = sb.length() > 4 * MAX_TEXT ? sb.substring(0, 4 * MAX_TEXT) + "..." : sb.toString();
        }
    }

    static String clip(String s) {
        return clip(s, MAX_TEXT);
    }

    static String clip(String s, int most) {
        return s == null || s.length() <= most ? s : s.substring(0, most) + "...";
    }

    /**
     * Bytes this process and its descendants (in local mode the PySpark daemon and workers) read from and
     * wrote to storage, and received and sent on the network, over the application (the trace's {@code io}):
     * the analysis derives the bandwidth the job saw from them. Null where it could not start.
     */
    private final IoCounters io;
    /** The hook's CPU time and the process's when the application began (a JVM may run several in turn). */
    private final long[] hookAtStart = HookCpu.parts();
    private final long processAtStart = HookCpu.processNanos();
    private final CpuBudget budget;

    public CrystalPerfListener(SparkConf conf) {
        this.conf = conf;
        SampleStore.clear();
        budget = Budgets.of(conf);
        IoCounters started = null;
        if (conf.getBoolean("spark.crystalperf.ioCounters", true)) {
            try {
                started = new IoCounters("driver").budget(budget).start();
            } catch (Throwable t) {
                LOG.log(Level.WARNING, "crystalperf: the I/O counters did not start (the job is not affected): " + t);
            }
        }
        io = started;
        tasks = new TaskTable(conf.getSizeAsBytes("spark.crystalperf.maxTaskBytes",
                Long.toString(TaskTable.DEFAULT_MAX_BYTES)));
        SampleStore.configure(conf.getSizeAsBytes("spark.crystalperf.maxSampleBytes",
                Long.toString(SampleStore.DEFAULT_MAX_BYTES)), this::measured);
        Thread hook = null;
        try {
            hook = new Thread(this::onShutdown, "crystalperf-shutdown");
            Runtime.getRuntime().addShutdownHook(hook);
        } catch (Throwable t) {
            LOG.log(Level.WARNING, "crystalperf: no partial trace on SIGTERM (the job is not affected): " + t);
            hook = null;
        }
        shutdownHook = hook;
    }

    private synchronized void measured(int[] stage, long[] task, long[] pythonWaitMs, long[] runQueueNs) {
        guard("recording the tasks' executor measures", () -> {
            for (int t = 0; t < task.length; t++) {
                tasks.measured(stage[t], task[t], pythonWaitMs[t], runQueueNs[t]);
            }
        });
    }

    private void warn(String warning) {
        if (warnings.size() < MAX_WARNINGS) {
            warnings.add(clip(warning));
        } else {
            warningsLeftOut++;
        }
    }

    /** Runs a callback's body: its failure is logged and kept as a warning, its time counted as the hook's. */
    private void guard(String what, Runnable body) {
        long started = System.nanoTime();
        try {
            body.run();
        } catch (Throwable t) {
            failed(what, t);
        }
        HookCpu.since(HookCpu.CALLBACKS, started);
    }

    private void failed(String what, Throwable t) {
        if (testing) {
            LOG.log(Level.SEVERE, "crystalperf: " + what + " failed", t);
        } else {
            LOG.log(Level.WARNING, "crystalperf: " + what + " failed (the job is not affected): " + t);
        }
        synchronized (this) {
            warn(what + " failed: " + t);
        }
    }

    private static double sec(long ms) {
        return ms / 1000.0;
    }

    @Override
    public synchronized void onApplicationStart(SparkListenerApplicationStart e) {
        guard("onApplicationStart", () -> {
            appId = e.appId().isDefined() ? e.appId().get() : appId;
            appAttempt = e.appAttemptId().isDefined() ? e.appAttemptId().get() : null;
            appName = e.appName();
            user = e.sparkUser();
            appStart = sec(e.time());
        });
    }

    @Override
    public synchronized void onEnvironmentUpdate(SparkListenerEnvironmentUpdate e) {
        guard("onEnvironmentUpdate", () -> {
            scala.collection.Map<String, scala.collection.Seq<Tuple2<String, String>>> details =
                    e.environmentDetails();
            Option<scala.collection.Seq<Tuple2<String, String>>> props = details.get("Spark Properties");
            if (props.isDefined()) {
                Map<String, String> raw = new TreeMap<>();
                for (Tuple2<String, String> kv : CollectionConverters.asJava(props.get())) {
                    raw.put(kv._1(), kv._2());
                }
                properties.putAll(Redaction.redact(raw));
            }
            Option<scala.collection.Seq<Tuple2<String, String>>> cp = details.get("Classpath Entries");
            if (cp.isDefined()) {
                for (Tuple2<String, String> kv : CollectionConverters.asJava(cp.get())) {
                    String entry = kv._1();
                    if (entry.startsWith("spark://") || entry.contains("://")) {
                        continue;
                    }
                    classpath.add(entry);
                }
            }
        });
    }

    @Override
    public synchronized void onExecutorAdded(SparkListenerExecutorAdded e) {
        guard("onExecutorAdded", () -> {
            Map<String, Object> ex = executors.computeIfAbsent(e.executorId(), k -> new LinkedHashMap<>());
            ex.put("id", e.executorId());
            ex.put("host", e.executorInfo().executorHost());
            ex.put("cores", e.executorInfo().totalCores());
            ex.put("added", sec(e.time()));
        });
    }

    @Override
    public synchronized void onExecutorRemoved(SparkListenerExecutorRemoved e) {
        guard("onExecutorRemoved", () -> {
            Map<String, Object> ex = executors.get(e.executorId());
            if (ex != null) {
                ex.put("removed", sec(e.time()));
            }
            warn("executor " + e.executorId() + " removed: " + e.reason());
        });
    }

    @Override
    public synchronized void onBlockManagerAdded(SparkListenerBlockManagerAdded e) {
        guard("onBlockManagerAdded", () -> {
            String id = e.blockManagerId().executorId();
            Map<String, Object> ex = executors.computeIfAbsent(id, k -> new LinkedHashMap<>());
            ex.put("id", id);
            ex.putIfAbsent("host", e.blockManagerId().host());
            ex.put("memory_bytes", e.maxMem());
            if (!ex.containsKey("added")) {
                ex.put("added", sec(e.time()));
            }
        });
    }

    @Override
    public synchronized void onJobStart(SparkListenerJobStart e) {
        guard("onJobStart", () -> {
            Map<String, Object> job = new LinkedHashMap<>();
            job.put("start", sec(e.time()));
            Properties p = e.properties();
            Map<String, String> attrs = new LinkedHashMap<>();
            if (p != null) {
                putIf(attrs, "call_site", p.getProperty("callSite.short"));
                // a stack trace, or a Spark Connect request's whole text (plans of hundreds of relations): bounded
                putIf(attrs, "call_site_long", clip(p.getProperty("callSite.long"), 8 * MAX_TEXT));
                putIf(attrs, "description", p.getProperty("spark.job.description"));
                putIf(attrs, "job_group", p.getProperty("spark.jobGroup.id"));
                putIf(attrs, "sql_execution_id", p.getProperty("spark.sql.execution.id"));
                String query = p.getProperty("sql.streaming.queryId");
                String batch = p.getProperty("streaming.sql.batchId");
                if (query != null && batch != null) {
                    job.put("trigger", query + "/" + batch);
                }
            }
            job.put("attributes", attrs);
            List<Integer> ids = new ArrayList<>();
            for (StageInfo si : CollectionConverters.asJava(e.stageInfos())) {
                ids.add(si.stageId());
                stageInfos.putIfAbsent(si.stageId(), new StageMeta(si));
            }
            Collections.sort(ids);
            jobStages.put(e.jobId(), ids);
            jobs.put(e.jobId(), job);
        });
    }

    /** The application ended with a non-zero exit code (SparkContext.stop(exitCode)). */
    private boolean exitFailed;

    private static final Pattern CANCELLED = Pattern.compile("SPARK_JOB_CANCELLED|\\bJob \\d+ cancelled\\b");

    /** Spark ends a job that was cancelled (a streaming query stopped, a job group cancelled, the user's
     * cancelJob) with JobFailed too; its message says which. A cancelled job did not fail the application. */
    static boolean isCancellation(String message) {
        return CANCELLED.matcher(message).find();
    }

    private static void putIf(Map<String, String> m, String k, String v) {
        if (v != null && !v.isEmpty()) {
            m.put(k, v);
        }
    }

    @Override
    public synchronized void onJobEnd(SparkListenerJobEnd e) {
        guard("onJobEnd", () -> {
            Map<String, Object> job = jobs.get(e.jobId());
            if (job == null) {
                return;
            }
            job.put("end", sec(e.time()));
            boolean ok = e.jobResult().getClass().getSimpleName().startsWith("JobSucceeded");
            Exception failure = !ok && e.jobResult() instanceof JobFailed ? ((JobFailed) e.jobResult()).exception()
                    : null;
            boolean cancelled = failure != null && isCancellation(String.valueOf(failure.getMessage()));
            job.put("status", ok ? "success" : cancelled ? "killed" : "failed");
            if (!ok && inShutdown()) {
                cutByShutdown = true;
            }
            if (failure != null) {
                warn("job " + e.jobId() + (cancelled ? " was cancelled: " : " failed: ") + failure);
            }
        });
    }

    @Override
    public synchronized void onStageSubmitted(SparkListenerStageSubmitted e) {
        guard("onStageSubmitted", () -> {
            StageInfo si = e.stageInfo();
            Map<String, Object> st = stages.computeIfAbsent(si.stageId(), k -> new LinkedHashMap<>());
            long submitted = si.submissionTime().isDefined() ? (Long) si.submissionTime().get() : System.currentTimeMillis();
            st.putIfAbsent("start", sec(submitted));
            st.put("attempts", si.attemptNumber() + 1);
            stageInfos.put(si.stageId(), new StageMeta(si));
        });
    }

    @Override
    public synchronized void onStageCompleted(SparkListenerStageCompleted e) {
        guard("onStageCompleted", () -> {
            StageInfo si = e.stageInfo();
            Map<String, Object> st = stages.computeIfAbsent(si.stageId(), k -> new LinkedHashMap<>());
            long now = System.currentTimeMillis();
            long done = si.completionTime().isDefined() ? (Long) si.completionTime().get() : now;
            if (!st.containsKey("start")) {
                st.put("start", sec(si.submissionTime().isDefined() ? (Long) si.submissionTime().get() : done));
            }
            st.put("end", sec(done));
            st.put("status", si.failureReason().isDefined() ? "failed" : "success");
            if (si.failureReason().isDefined()) {
                st.put("failure", clip(si.failureReason().get()));
            }
            stageInfos.put(si.stageId(), new StageMeta(si));
            for (RDDInfo rdd : CollectionConverters.asJava(si.rddInfos())) {
                long size = rdd.memSize() + rdd.diskSize();
                if (size > 0) {
                    cachedBytes.put(rdd.id(), size);
                }
            }
            sqlPlans.stageCompleted(si.stageId(), CollectionConverters.asJava(si.accumulables().keySet()));
        });
    }

    @Override
    public synchronized void onTaskEnd(SparkListenerTaskEnd e) {
        // Inline, not through guard(): no object per task, whatever the task count.
        long started = System.nanoTime();
        try {
            TaskInfo ti = e.taskInfo();
            double begun = sec(ti.launchTime());
            double ended = Math.max(begun, sec(ti.finishTime() > 0 ? ti.finishTime() : System.currentTimeMillis()));
            byte status = ti.successful() ? TaskTable.SUCCESS : ti.killed() ? TaskTable.KILLED
                    : ti.failed() ? TaskTable.FAILED : TaskTable.UNKNOWN;
            tasks.add(e.stageId(), ti.taskId(), ti.index(), ti.attemptNumber(), ti.executorId(), ti.host(), begun,
                    ended, status, e.taskMetrics());
            if (e.taskMetrics() != null) {
                long[] sum = taskCpuByExecutor.get(ti.executorId());
                if (sum == null && taskCpuByExecutor.size() < SampleStore.MAX_EXECUTORS) {
                    sum = new long[1];
                    taskCpuByExecutor.put(ti.executorId(), sum);
                }
                if (sum != null) {
                    sum[0] += e.taskMetrics().executorCpuTime();
                }
            }
        } catch (Throwable t) {
            failed("onTaskEnd", t);
        }
        HookCpu.since(HookCpu.CALLBACKS, started);
    }

    /** Every task metric, under the core's well-known names and under Spark's own. */
    static Map<String, Double> metrics(TaskMetrics t) {
        return TaskTable.named(TaskTable.raw(t));
    }

    @Override
    public synchronized void onOtherEvent(SparkListenerEvent e) {
        guard("onOtherEvent", () -> {
            if (e.getClass().getName().endsWith("SparkListenerSQLExecutionStart")) {
                org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart start =
                        (org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart) e;
                if (sqlDescriptions.size() < MAX_SQL_DESCRIPTIONS) {
                    sqlDescriptions.put(Long.toString(start.executionId()), clip(start.description()));
                }
                if (start.sparkPlanInfo() != null) {
                    sqlPlans.plan(start.executionId(), start.description(), start.sparkPlanInfo());
                }
                String plan = start.physicalPlanDescription();
                Matcher m = WRITE_PATH.matcher(plan == null ? "" : plan);
                while (m.find()) {
                    Path out = Paths.get(m.group(1));
                    Path parent = out.getParent();
                    lastOutputDir = (parent != null ? parent : out).toString();
                }
            } else if (e.getClass().getName().endsWith("StreamingQueryListener$QueryProgressEvent")) {
                streamingTrigger(
                        ((org.apache.spark.sql.streaming.StreamingQueryListener.QueryProgressEvent) e).progress());
            } else if (e.getClass().getName().endsWith("SparkListenerSQLAdaptiveExecutionUpdate")) {
                org.apache.spark.sql.execution.ui.SparkListenerSQLAdaptiveExecutionUpdate update =
                        (org.apache.spark.sql.execution.ui.SparkListenerSQLAdaptiveExecutionUpdate) e;
                if (update.sparkPlanInfo() != null) {
                    sqlPlans.plan(update.executionId(), null, update.sparkPlanInfo());
                }
            }
        });
    }

    /**
     * A micro-batch's progress says when its trigger fired: a batch whose trigger fired after the batch before had
     * ended waited for it, which the jobs' times alone cannot tell from a query's own steps between batches.
     */
    private void streamingTrigger(org.apache.spark.sql.streaming.StreamingQueryProgress progress) {
        if (progress == null || progress.id() == null || progress.timestamp() == null
                || streamingTriggers.size() >= MAX_STREAMING_TRIGGERS) {
            return;
        }
        Long ran = progress.durationMs() == null ? null : progress.durationMs().get("triggerExecution");
        double fired = java.time.Instant.parse(progress.timestamp()).toEpochMilli() / 1000.0;
        streamingTriggers.put(progress.id() + "/" + progress.batchId(),
                new double[] {fired, ran == null ? Double.NaN : ran / 1000.0});
    }

    @Override
    public void onApplicationEnd(SparkListenerApplicationEnd e) {
        boolean inShutdown = inShutdown();
        boolean cut;
        synchronized (this) {
            if (finished) {
                return;
            }
            finished = true;
            try {  // SparkContext.stop(exitCode): only a non-zero one says something (a PySpark JVM always says 0)
                Option<Object> code = e.exitCode();
                exitFailed = code.isDefined() && code.get() instanceof Integer && (Integer) code.get() != 0;
            } catch (Throwable t) {
                exitFailed = false;
            }
            cut = cutByShutdown;
            for (Map<String, Object> job : jobs.values()) {
                cut |= !job.containsKey("end");
            }
            if (!inShutdown) {
                cancelOpenWork();
            }
        }
        removeShutdownHook();
        // Stopped by Spark's own shutdown hook (the driver was SIGTERM'd, or its Python died) with jobs still
        // running: the trace says what it holds is partial. An application whose jobs had all ended and that
        // never called stop() ends this way too, complete.
        String partial = inShutdown && cut ? PARTIAL_STOPPED_IN_SHUTDOWN : null;
        finish(sec(e.time()), partial, !inShutdown || conf.getBoolean("spark.crystalperf.analysisOnShutdown", true));
    }

    /** SparkContext.stop() posts the application's end before its scheduler cancels what still runs (a streaming
     * batch the query's stop did not wait for), so those jobs' ends reach no listener before the trace is
     * written. They end as the cancellation will end them. */
    private void cancelOpenWork() {
        for (Map<String, Object> job : jobs.values()) {
            if (!job.containsKey("status")) {
                job.put("status", "killed");
            }
        }
        for (Map<String, Object> st : stages.values()) {
            if (st.containsKey("start") && !st.containsKey("status")) {
                st.put("status", "killed");
            }
        }
    }

    /** Writes the trace and starts the finish; never throws. */
    private void finish(double end, String partial, boolean startFinish) {
        File outDir = null;
        File trace = null;
        long cpu = HookCpu.ownThreadNanos();
        try {
            outDir = outputDir();
            synchronized (this) {
                trace = writeTrace(end, outDir, partial);
            }
            writtenTrace = trace;
        } catch (Throwable t) {
            if (testing) {
                LOG.log(Level.SEVERE, "crystalperf: writing the trace failed", t);
            }
            LOG.warning("crystalperf: could not write the trace to " + outDir + " (the job is not affected): " + t);
        }
        long written = HookCpu.ownThreadNanos();
        if (trace != null && startFinish) {
            try {
                finishInPython(trace, outDir, cpu >= 0 && written >= cpu ? (written - cpu) / 1e9 : -1);
            } catch (Throwable t) {
                LOG.warning("crystalperf: the analysis did not run (the trace is kept; run `crystalperf analyze "
                        + trace + "`): " + t);
            }
        }
    }

    /** Whether the JVM is shutting down (a hook can no longer be added then). */
    static boolean inShutdown() {
        try {
            Thread probe = new Thread(() -> { });
            Runtime.getRuntime().addShutdownHook(probe);
            Runtime.getRuntime().removeShutdownHook(probe);
            return false;
        } catch (IllegalStateException e) {
            return true;
        } catch (Throwable t) {
            return false;
        }
    }

    private void removeShutdownHook() {
        if (shutdownHook == null || Thread.currentThread() == shutdownHook) {
            return;
        }
        try {
            Runtime.getRuntime().removeShutdownHook(shutdownHook);
        } catch (Throwable ignored) {
            // in shutdown already: the hook runs and finds the application finished
        }
    }

    /**
     * The JVM is exiting (SIGTERM, System.exit, the PySpark driver gone) and the application never ended: write
     * what was recorded as a partial trace, and start the finish (detached: it costs a fork). Bounded: the write
     * runs on a daemon thread the hook waits for at most {@code spark.crystalperf.shutdownWriteTimeoutMs}; the
     * JVM's exit is never held longer.
     */
    private void onShutdown() {
        long timeoutMs = conf.getLong("spark.crystalperf.shutdownWriteTimeoutMs", 5000);
        Thread writer = new Thread(() -> {
            synchronized (this) {
                if (finished) {
                    return;
                }
                finished = true;
            }
            finish(System.currentTimeMillis() / 1000.0, PARTIAL_SHUTDOWN,
                    conf.getBoolean("spark.crystalperf.analysisOnShutdown", true));
        }, "crystalperf-partial-trace");
        writer.setDaemon(true);
        writer.start();
        try {
            writer.join(Math.max(1, timeoutMs));
        } catch (InterruptedException ignored) {
            Thread.currentThread().interrupt();
        }
        if (writer.isAlive()) {
            LOG.warning("crystalperf: the partial trace was not written within " + timeoutMs + " ms of the shutdown");
        }
    }

    /**
     * Where the trace and the report go. {@code spark.crystalperf.outputDir} as it is; otherwise a directory that
     * other applications share (the parent of the job's output, the working directory), so this application's
     * files go to a {@code crystalperf-<application id>} directory inside it.
     */
    File outputDir() {
        String explicit = conf.get("spark.crystalperf.outputDir", "");
        String dir;
        String why;
        if (!explicit.isEmpty()) {
            dir = explicit.startsWith("file:") ? URI.create(explicit).getPath() : explicit;
            why = "spark.crystalperf.outputDir";
        } else {
            String shared;
            if (lastOutputDir != null) {
                shared = lastOutputDir;
                why = "next to the application's last output";
            } else {
                shared = System.getProperty("user.dir");
                why = "the driver's working directory (set spark.crystalperf.outputDir to choose)";
            }
            dir = new File(shared, applicationDirName(appId)).getPath();
            sharedOutputDir = new File(shared);
        }
        LOG.warning("crystalperf: output directory " + dir + " (" + why + ")");
        return new File(dir);
    }

    /** {@code crystalperf-<application id>}, the id reduced to characters safe in a file name. */
    static String applicationDirName(String appId) {
        String safe = (appId == null ? "unknown" : appId).replaceAll("[^A-Za-z0-9._-]", "_");
        if (safe.isEmpty() || safe.startsWith(".")) {
            safe = "app" + safe;
        }
        return "crystalperf-" + (safe.length() > 200 ? safe.substring(0, 200) : safe);
    }

    private File writeTrace(double end, File outDir, String partial) throws Exception {
        // Local-mode executor: its last samples are taken synchronously, no RPC round trip needed.
        CrystalPerfPlugin.Sampler local = CrystalPerfPlugin.Sampler.local;
        if (local != null) {
            local.flush();
        }
        DriverSampler driver = CrystalPerfPlugin.driverSampler;
        if (driver != null) {
            driver.flush();
        }
        Files.createDirectories(outDir.toPath());
        File target = new File(outDir, "crystalperf-trace.json.gz");
        writeAtomically(target.toPath(), out -> {
            try (JsonGenerator g = new ObjectMapper().getFactory().createGenerator(out)) {
                g.disable(JsonGenerator.Feature.AUTO_CLOSE_TARGET);
                writeDocument(g, end, partial);
            }
        });
        LOG.warning("crystalperf: " + (partial != null ? "partial " : "") + "trace written to " + target);
        return target;
    }

    interface Body {
        void write(java.io.OutputStream out) throws IOException;
    }

    /**
     * A gzip file written as crystalperf writes every file: a unique temporary file in the target's directory,
     * flushed to the device, renamed over the target, the directory synced; the temporary is removed on failure.
     */
    static void writeAtomically(Path target, Body body) throws IOException {
        Path dir = target.toAbsolutePath().getParent();
        Path tmp = Files.createTempFile(dir, "." + target.getFileName() + ".", ".tmp");
        boolean done = false;
        try {
            try (FileOutputStream file = new FileOutputStream(tmp.toFile());
                 GZIPOutputStream gz = new GZIPOutputStream(file, 1 << 16)) {
                body.write(gz);
                gz.finish();
                file.flush();
                file.getFD().sync();
            }
            Files.move(tmp, target, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
            done = true;
            try (FileChannel d = FileChannel.open(dir, StandardOpenOption.READ)) {
                d.force(true);
            } catch (IOException | UnsupportedOperationException ignored) {
                // not every file system syncs a directory; the rename itself is atomic
            }
        } finally {
            if (!done) {
                Files.deleteIfExists(tmp);
            }
        }
    }

    /** The trace document as a map (small applications, tests); the file is written by {@link #writeDocument}. */
    @SuppressWarnings("unchecked")
    synchronized Map<String, Object> buildTrace(double end) throws IOException {
        java.io.ByteArrayOutputStream bytes = new java.io.ByteArrayOutputStream();
        ObjectMapper mapper = new ObjectMapper();
        try (JsonGenerator g = mapper.getFactory().createGenerator(bytes)) {
            writeDocument(g, end, null);
        }
        return mapper.readValue(bytes.toByteArray(), Map.class);
    }

    private void writeDocument(JsonGenerator g, double end, String partial) throws IOException {
        String schemaVersion = conf.get("spark.crystalperf.schemaVersion", SCHEMA_VERSION);
        g.writeStartObject();
        g.writeStringField("schema_version", schemaVersion);
        g.writeStringField("$schema", "urn:crystalperf:trace:" + schemaVersion);
        Map<String, Object> producer = new LinkedHashMap<>();
        producer.put("name", "crystalperf");
        producer.put("version", VERSION);
        producer.put("hook", "spark-listener");
        g.writeObjectField("producer", producer);
        if (partial != null) {
            g.writeStringField("partial", partial);
        }
        boolean anyFailed = false;
        for (Map<String, Object> j : jobs.values()) {
            anyFailed |= "failed".equals(j.get("status"));
        }
        Map<String, Object> app = new LinkedHashMap<>();
        app.put("framework", "spark");
        app.put("framework_version", org.apache.spark.package$.MODULE$.SPARK_VERSION());
        app.put("id", appId);
        app.put("name", appName);
        if (appAttempt != null) {
            app.put("attempt", appAttempt);
        }
        app.put("start", appStart);
        app.put("end", Math.max(appStart, end));
        app.put("status", partial != null ? "cancelled" : anyFailed || exitFailed ? "failed" : "succeeded");
        app.put("output_dir", lastOutputDir);
        if (user != null) {
            app.put("user", user);
        }
        g.writeObjectField("application", app);
        g.writeObjectField("environment", environment());
        g.writeArrayFieldStart("operations");
        writeOperations(g, end);
        g.writeEndArray();
        writeSamples(g);
        Map<String, Double> metrics = new TreeMap<>();
        long cached = 0;
        for (long v : cachedBytes.values()) {
            cached += v;
        }
        metrics.put("cached_bytes", (double) cached);
        for (String k : new String[] {"spill_disk_bytes", "spill_memory_bytes", "shuffle_write_bytes",
                "shuffle_read_bytes", "input_bytes", "output_bytes"}) {
            metrics.put(k, tasks.total(k));
        }
        List<IoCounters.Row> driverRows = io != null ? io.stop() : Collections.emptyList();
        IoCounters.Row lastRow = driverRows.isEmpty() ? null : driverRows.get(driverRows.size() - 1);
        // In local mode the executor is this process (its Python workers its descendants); on a cluster the
        // driver's I/O says nothing of the job's.
        if (localCores() > 0 && lastRow != null && lastRow.storageReadBytes != null) {
            metrics.put("storage_read_bytes", lastRow.storageReadBytes);
            metrics.put("storage_write_bytes", lastRow.storageWriteBytes);
        }
        g.writeObjectField("metrics", metrics);
        List<Map<String, Object>> ioRows = new ArrayList<>();
        for (IoCounters.Row row : driverRows) {
            ioRows.add(row.toMap());
        }
        ioRows.addAll(SampleStore.ioRows());
        g.writeObjectField("io", ioRows);
        g.writeObjectField("hook", hookCost());
        if (!sqlPlans.isEmpty()) {
            g.writeObjectField("sql_queries", sqlPlans.toTrace());
        }
        List<String> all = new ArrayList<>(warnings);
        String sqlWarning = sqlPlans.warning();
        if (sqlWarning != null) {
            all.add(sqlWarning);
        }
        if (warningsLeftOut > 0) {
            all.add(warningsLeftOut + " more warning(s) not kept (the first " + MAX_WARNINGS + " are above)");
        }
        g.writeObjectField("warnings", all);
        g.writeEndObject();
    }

    /**
     * What the hook cost (schema 1.9), per process: the driver's (in local mode the executor's too: the same JVM),
     * measured here, and each cluster executor's latest report.
     */
    private Map<String, Object> hookCost() {
        long[] now = HookCpu.parts();
        for (int i = 0; i < now.length; i++) {
            now[i] -= hookAtStart[i];
        }
        long process = HookCpu.processNanos();
        long[] pace = new long[2];
        CrystalPerfPlugin.Sampler local = CrystalPerfPlugin.Sampler.local;
        if (local != null) {
            pace = local.paceCounts();
        }
        long[] windows = budget.windows();
        HookReport driver = new HookReport("driver", IoCounters.hostname(), now,
                process >= 0 && processAtStart >= 0 ? process - processAtStart : -1, processAtStart,
                HookCpu.processStartMillis(), null, null, budget.share(), budget.cores(),
                pace[0], pace[1], windows[0], windows[1]);
        List<Map<String, Object>> processes = new ArrayList<>();
        processes.add(driver.document());
        for (HookReport executor : SampleStore.hookReports()) {
            processes.add(executor.as("executor:" + executor.source).document());
        }
        Map<String, Object> hook = new LinkedHashMap<>();
        hook.put("processes", processes);
        return hook;
    }

    private Map<String, Object> environment() {
        Map<String, Object> env = new LinkedHashMap<>();
        List<Map<String, Object>> exs = new ArrayList<>();
        List<String> hosts = new ArrayList<>();
        int slots = 0;
        long memory = 0;
        int localCores = localCores();
        for (Map<String, Object> ex : executors.values()) {
            Map<String, Object> copy = new LinkedHashMap<>(ex);
            if ("driver".equals(ex.get("id")) && executors.size() > 1) {
                continue;  // on a cluster the driver runs no tasks
            }
            if (!copy.containsKey("cores") && localCores > 0) {
                copy.put("cores", localCores);
            }
            Object cores = copy.get("cores");
            if (cores instanceof Integer) {
                slots += (Integer) cores;
            }
            Object mem = copy.get("memory_bytes");
            if (mem instanceof Long) {
                memory += (Long) mem;
            }
            Map<String, Object> threadCpu = threadCpu(String.valueOf(ex.get("id")));
            if (threadCpu != null) {
                copy.put("thread_cpu", threadCpu);
            }
            Object host = copy.get("host");
            if (host != null && !hosts.contains(host.toString())) {
                hosts.add(host.toString());
            }
            exs.add(copy);
        }
        env.put("hosts", hosts);
        env.put("executors", exs);
        if (!exs.isEmpty() && exs.get(0).get("cores") instanceof Integer) {
            env.put("cores_per_executor", exs.get(0).get("cores"));
        }
        if (slots > 0) {
            env.put("total_slots", slots);
        }
        env.put("cpu_count", Runtime.getRuntime().availableProcessors());
        if (memory > 0) {
            env.put("memory_bytes", memory);
        }
        env.put("classpath", classpath);
        env.put("properties", properties);
        return env;
    }

    /**
     * An executor's CPU seconds since its hook started, by thread kind (schema 1.6): its tasks' (Spark's
     * executorCpuTime), the kinds {@link ThreadKinds} reads from /proc, and "other" the rest of the process's; the
     * driver's in local mode, where it runs the tasks; and the process's kernel time and minor page faults over the
     * same span, and its task threads' kernel time (schema 1.13). Null where the executor's hook did not report them.
     */
    private Map<String, Object> threadCpu(String executorId) {
        long[] kinds;
        long[] faults;
        long process;
        if ("driver".equals(executorId)) {
            CrystalPerfPlugin.Sampler local = CrystalPerfPlugin.Sampler.local;
            kinds = local == null ? null : local.kindsSinceStart();
            faults = local == null ? null : local.faultsSinceStart();
            long now = HookCpu.processNanos();
            process = now >= 0 && processAtStart >= 0 ? now - processAtStart : -1;
        } else {
            HookReport report = SampleStore.hookReport(executorId);
            kinds = report == null ? null : report.threadKinds;
            faults = report == null ? null : report.processFaults;
            process = report == null ? -1 : report.processNanos;
        }
        if (kinds == null || process < 0 || kinds.length != ThreadKinds.KINDS.length) {
            return null;
        }
        long[] taskSum = taskCpuByExecutor.get(executorId);
        Map<String, Double> split = ThreadKinds.split(taskSum == null ? 0 : Math.max(0, taskSum[0]), kinds, process);
        Map<String, Object> cpu = new LinkedHashMap<>(split);
        if (faults != null && faults.length == 3) {
            // schema 1.13: the process's kernel time (10 ms ticks), never more than its CPU time over the span, and
            // the part of it in the task threads (their whole lives: a pool's threads start with their first task)
            cpu.put("kernel", Math.min(faults[1], process) / 1e9);
            cpu.put("minor_faults", faults[0]);
            if (faults[2] >= 0) {
                cpu.put("task_kernel", Math.min(faults[2], Math.max(faults[1], 0)) / 1e9);
            }
        }
        return cpu;
    }

    private int localCores() {
        String master = conf.get("spark.master", "");
        Matcher m = Pattern.compile("^local\\[(\\d+|\\*)").matcher(master);
        if (m.find()) {
            return "*".equals(m.group(1)) ? Runtime.getRuntime().availableProcessors() : Integer.parseInt(m.group(1));
        }
        return "local".equals(master) ? 1 : -1;
    }

    /** The job that ran a stage: the earliest job containing it that was active when it was submitted. */
    private Map<Integer, Integer> ranIn() {
        Map<Integer, Integer> owner = new HashMap<>();
        for (Map.Entry<Integer, List<Integer>> js : jobStages.entrySet()) {
            Map<String, Object> job = jobs.get(js.getKey());
            double jstart = (Double) job.get("start");
            for (int sid : js.getValue()) {
                Map<String, Object> st = stages.get(sid);
                if (st == null || !st.containsKey("start")) {
                    continue;
                }
                double sstart = (Double) st.get("start");
                Object jend = job.get("end");
                boolean active = sstart >= jstart - 0.001 && (jend == null || sstart <= (Double) jend + 0.001);
                Integer current = owner.get(sid);
                if (active && (current == null || js.getKey() < current)) {
                    owner.put(sid, js.getKey());
                }
            }
        }
        return owner;
    }

    private void writeOperations(JsonGenerator g, double appEnd) throws IOException {
        Map<Integer, Integer> owner = ranIn();
        for (Map.Entry<Integer, Map<String, Object>> je : jobs.entrySet()) {
            int jobId = je.getKey();
            Map<String, Object> job = je.getValue();
            double jstart = (Double) job.get("start");
            double jend = job.containsKey("end") ? (Double) job.get("end") : Math.max(jstart, appEnd);
            @SuppressWarnings("unchecked")
            Map<String, String> attrs = (Map<String, String>) job.get("attributes");
            List<Integer> jobStageIds = jobStages.getOrDefault(jobId, Collections.emptyList());
            StageMeta result = jobStageIds.isEmpty() ? null : stageInfos.get(jobStageIds.get(jobStageIds.size() - 1));
            // SQL jobs carry no call site of their own; their result stage's name is the action's.
            String fallback = result != null ? result.name : "job " + jobId;
            String sql = sqlDescriptions.get(attrs.get("sql_execution_id"));
            if (sql != null) {
                fallback = "SQL " + attrs.get("sql_execution_id") + ": " + sql;
            }
            String name = attrs.getOrDefault("description", attrs.getOrDefault("call_site", fallback));
            double[] trigger = job.containsKey("trigger") ? streamingTriggers.get((String) job.get("trigger")) : null;
            if (trigger != null) {
                attrs = new LinkedHashMap<>(attrs);
                attrs.put("streaming_trigger_start", java.math.BigDecimal.valueOf(trigger[0]).toPlainString());
                if (!Double.isNaN(trigger[1])) {
                    attrs.put("streaming_trigger_s", java.math.BigDecimal.valueOf(trigger[1]).toPlainString());
                }
            }
            g.writeStartObject();
            g.writeStringField("id", "job-" + jobId);
            g.writeStringField("name", "job " + jobId + ": " + name);
            g.writeStringField("kind", "job");
            g.writeNumberField("start", jstart);
            g.writeNumberField("end", Math.max(jstart, jend));
            g.writeStringField("status", String.valueOf(job.getOrDefault("status", "running")));
            g.writeObjectField("attributes", attrs);
            g.writeArrayFieldStart("children");
            for (int sid : jobStageIds) {
                writeStage(g, sid, jobId, jobStageIds, owner, jstart, appEnd);
            }
            g.writeEndArray();
            g.writeEndObject();
        }
    }

    private static String stageId(int sid, boolean ran, int jobId) {
        return ran ? "stage-" + sid : "stage-" + sid + "-skipped-in-job-" + jobId;
    }

    private void writeStage(JsonGenerator g, int sid, int jobId, List<Integer> sids, Map<Integer, Integer> owner,
                            double jstart, double appEnd) throws IOException {
        StageMeta si = stageInfos.get(sid);
        Map<String, Object> st = stages.get(sid);
        boolean ran = st != null && Integer.valueOf(jobId).equals(owner.get(sid));
        g.writeStartObject();
        g.writeStringField("id", stageId(sid, ran, jobId));
        g.writeStringField("name", "stage " + sid + ": " + (si != null ? si.name : ""));
        g.writeStringField("kind", "stage");
        g.writeArrayFieldStart("parents");
        if (si != null) {
            for (int pid : si.parentIds) {
                if (sids.contains(pid)) {
                    boolean pran = stages.containsKey(pid) && Integer.valueOf(jobId).equals(owner.get(pid));
                    g.writeString(stageId(pid, pran, jobId));
                }
            }
        }
        g.writeEndArray();
        Map<String, String> attrs = new LinkedHashMap<>();
        if (ran) {
            double start = (Double) st.get("start");
            double end = st.containsKey("end") ? (Double) st.get("end") : Math.max(start, appEnd);
            g.writeNumberField("start", start);
            g.writeNumberField("end", Math.max(start, end));
            g.writeStringField("status", String.valueOf(st.getOrDefault("status", "running")));
            if (st.containsKey("failure")) {
                attrs.put("failure", String.valueOf(st.get("failure")));
            }
            attrs.put("attempts", String.valueOf(st.getOrDefault("attempts", 1)));
            TaskTable.Stage recorded = tasks.existing(sid);
            g.writeArrayFieldStart("tasks");
            if (recorded != null) {
                for (int i = 0; i < recorded.keptCount; i++) {
                    tasks.writeTask(g, recorded.kept(i));
                }
            }
            g.writeEndArray();
            // Schema 1.4: how many tasks ran, and their exact totals (tasks may be a uniform sample of them).
            g.writeNumberField("task_count", recorded != null ? recorded.taskCount : 0);
            if (recorded != null) {
                g.writeObjectField("metrics", tasks.stageMetrics(recorded));
                if (recorded.taskCount > recorded.keptCount) {
                    attrs.put("tasks_sampled", recorded.keptCount + " of " + recorded.taskCount
                            + " (spark.crystalperf.maxTaskBytes)");
                }
                long measured = tasks.queueMeasured(recorded);
                if (measured > 0 && measured < recorded.taskCount) {
                    attrs.put("cpu_wait_measured", measured + " of " + recorded.taskCount + " tasks");
                }
                if (recorded.failed > 0) {
                    attrs.put("failed_tasks", Long.toString(recorded.failed));
                }
                if (recorded.killed > 0) {
                    attrs.put("killed_tasks", Long.toString(recorded.killed));
                }
            }
        } else {
            g.writeNumberField("start", jstart);
            g.writeNumberField("end", jstart);
            g.writeStringField("status", "skipped");
        }
        if (si != null) {
            g.writeNumberField("parallelism", Math.max(1, si.numTasks));
            if (si.details != null) {
                attrs.put("call_site", si.details);
            }
            attrs.put("rdd_lineage", si.lineage);
        }
        g.writeObjectField("attributes", attrs);
        g.writeEndObject();
    }

    /** The samples section (schema 1.2+), streamed from the store's tables; nothing when there are none. */
    private void writeSamples(JsonGenerator g) throws IOException {
        if (SampleStore.rowCount() == 0) {
            return;
        }
        long bucketMs = SampleStore.bucketMs();
        long originBucket = (long) Math.floor(appStart * 1000.0 / bucketMs);
        SampleStore.Snapshot snap = SampleStore.snapshot();
        List<String> frames = snap.frames;
        List<int[]> stacks = snap.stacks;
        List<String> states = snap.states;
        g.writeObjectFieldStart("samples");
        g.writeNumberField("interval_s", SampleStore.intervalMs() / 1000.0);
        g.writeNumberField("bucket_s", bucketMs / 1000.0);
        g.writeNumberField("origin", originBucket * bucketMs / 1000.0);
        g.writeArrayFieldStart("frames");
        for (String f : frames) {
            g.writeObject(frame(f));
        }
        g.writeEndArray();
        g.writeArrayFieldStart("stacks");
        for (int[] s : stacks) {
            g.writeArray(s, 0, s.length);
        }
        g.writeEndArray();
        g.writeObjectField("states", states);
        // keys: one per (stage, task); the rows are written in the store's order, their key ids assigned here
        Map<Long, Map<Long, Integer>> keyIds = new HashMap<>();
        List<long[]> keys = new ArrayList<>();
        int n = snap.rows();
        int[] keyCol = new int[n];
        long[] bucketCol = new long[n];
        int[] stackCol = new int[n];
        long[] countCol = new long[n];
        for (int i = 0; i < n; i++) {
            Map<Long, Integer> byTask = keyIds.computeIfAbsent((long) snap.stage[i], k -> new HashMap<>());
            Integer kid = byTask.get(snap.task[i]);
            if (kid == null) {
                kid = keys.size();
                byTask.put(snap.task[i], kid);
                keys.add(new long[] {snap.stage[i], snap.task[i]});
            }
            keyCol[i] = kid;
            bucketCol[i] = Math.max(0, snap.bucket[i] - originBucket);
            stackCol[i] = snap.stack[i];
            countCol[i] = snap.count[i];
        }
        int rows = n;
        g.writeArrayFieldStart("keys");
        for (long[] k : keys) {
            g.writeStartObject();
            if (k[0] == DriverSampler.DRIVER_STAGE) {
                g.writeStringField("operation", DRIVER_OPERATION);
                g.writeStringField("thread", DRIVER_JVM_THREAD);
            } else {
                g.writeStringField("operation", "stage-" + k[0]);
                g.writeStringField("task", Long.toString(k[1]));
                g.writeStringField("thread", "task");
            }
            g.writeEndObject();
        }
        g.writeEndArray();
        g.writeFieldName("key");
        g.writeArray(keyCol, 0, rows);
        g.writeFieldName("bucket");
        g.writeArray(bucketCol, 0, rows);
        g.writeFieldName("stack");
        g.writeArray(stackCol, 0, rows);
        g.writeFieldName("count");
        g.writeArray(countCol, 0, rows);
        g.writeNumberField("dropped", SampleStore.dropped());
        g.writeObjectField("executors", new ArrayList<>(SampleStore.executors()));
        g.writeEndObject();
    }

    private static Map<String, Object> frame(String encoded) {
        String[] p = encoded.split("\u0002", -1);
        Map<String, Object> f = new LinkedHashMap<>();
        f.put("name", p[0] + "." + p[1]);
        String file = p.length > 2 && !p[2].isEmpty() ? p[2] : null;
        if (file != null) {
            f.put("file", file);
        }
        int line = p.length > 3 ? Integer.parseInt(p[3]) : -1;
        if (line >= 0) {
            f.put("line", line);
        }
        String lang = "java";
        if (line == -2) {
            lang = "native";
        } else if (file != null && file.endsWith(".scala")) {
            lang = "scala";
        } else if (file == null) {
            lang = "unknown";
        }
        f.put("language", lang);
        if (p.length > 4 && !p[4].isEmpty()) {
            f.put("module", p[4]);
        }
        return f;
    }

    /**
     * The Python side merges the PySpark workers' samples into the trace and runs the same analysis as
     * {@code crystalperf analyze}, in its own process: it must not count toward the job, a crash there must not
     * reach the application, and SparkContext.stop() must not wait for it. So it is started detached (its own
     * session where {@code setsid} exists, stdin from /dev/null, its output appended to
     * {@code crystalperf-analysis.log} in the output directory, with its exit status last) and outlives the
     * driver; {@code spark.crystalperf.waitForAnalysisS} makes the driver wait for it (at most that long; by
     * default only with {@code spark.crystalperf.analysis=false}, where the finish only merges the Python
     * samples into the trace, so the trace is final when stop() returns). The command line is the one Python's
     * {@code INTEGRATION.finish_command(trace, "--out", dir, ...)} builds.
     */
    private void finishInPython(File trace, File outDir, double writingS) throws Exception {
        String python = conf.get("spark.crystalperf.python", "");
        if (python.isEmpty()) {
            python = System.getenv().getOrDefault("PYSPARK_DRIVER_PYTHON", System.getenv().getOrDefault("PYSPARK_PYTHON", "python3"));
        }
        List<String> cmd = new ArrayList<>();
        cmd.add(python);
        cmd.add("-m");
        cmd.add("crystalperf.integrations.spark.finish");
        cmd.add(trace.getAbsolutePath());
        cmd.add("--out");
        cmd.add(outDir.getAbsolutePath());
        String spool = conf.get("spark.crystalperf.spoolDir", "");
        if (!spool.isEmpty()) {
            cmd.add("--spool");
            cmd.add(spool);
        }
        File shared = sharedOutputDir;
        if (shared != null && outDir.getAbsoluteFile().getParentFile() != null
                && outDir.getAbsoluteFile().getParentFile().equals(shared.getAbsoluteFile())) {
            // The files under their documented names in the shared directory stay the latest application's, as
            // links into its own directory: nothing another application wrote is overwritten.
            cmd.add("--link-latest");
        }
        boolean analysis = conf.getBoolean("spark.crystalperf.analysis", true);
        if (!analysis) {
            cmd.add("--no-analysis");
        }
        if (writingS >= 0) {
            // the trace cannot hold what writing it cost: the finish adds it to the driver's hook cost
            cmd.add("--trace-write-s");
            cmd.add(Double.toString(writingS));
        }
        long timeout = conf.getLong("spark.crystalperf.analysisTimeoutS", 900);
        long wait = conf.getLong("spark.crystalperf.waitForAnalysisS", analysis ? 0 : timeout);
        List<String> launch = new ArrayList<>();
        String setsid = firstExisting("/usr/bin/setsid", "/bin/setsid");
        if (setsid != null) {
            launch.add(setsid);
        }
        String sh = firstExisting("/bin/sh");
        if (sh != null) {
            // The shell waits for the finish and writes its exit status to the log, where the driver cannot.
            // timeout(1) bounds it, where it exists.
            String limit = firstExisting("/usr/bin/timeout", "/bin/timeout");
            launch.add(sh);
            launch.add("-c");
            launch.add((limit != null ? limit + " -k 10 " + timeout + " " : "") + "\"$@\"; s=$?; "
                    + "echo \"crystalperf: the finish exited with status $s\"; exit $s");
            launch.add("crystalperf-finish");
        }
        launch.addAll(cmd);
        File log = new File(outDir, "crystalperf-analysis.log");
        ProcessBuilder pb = new ProcessBuilder(launch).redirectErrorStream(true)
                .redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null")))
                .redirectOutput(ProcessBuilder.Redirect.appendTo(log));
        pb.environment().put("PYTHONUNBUFFERED", "1");
        Process p = pb.start();
        if (wait <= 0) {
            LOG.warning("crystalperf: the analysis runs detached (pid " + p.pid() + "); the report will be written to "
                    + new File(outDir, "crystalperf-report.html") + " (log: " + log + ")");
            return;
        }
        if (!p.waitFor(wait, TimeUnit.SECONDS)) {
            LOG.warning("crystalperf: the analysis goes on in the background (pid " + p.pid() + "); see " + log);
            return;
        }
        if (p.exitValue() != 0) {
            LOG.warning("crystalperf: the analysis failed (exit " + p.exitValue() + "; the trace is kept: "
                    + trace + "); see " + log);
        } else {
            LOG.warning("crystalperf: " + (analysis ? "report written to " + new File(outDir, "crystalperf-report.html")
                    : "trace finished: " + trace));
        }
    }

    private static String firstExisting(String... paths) {
        for (String path : paths) {
            if (new File(path).canExecute()) {
                return path;
            }
        }
        return null;
    }
}
