package org.crystalperf.spark;

import java.io.File;
import java.io.FileOutputStream;
import java.io.OutputStream;
import java.lang.management.ManagementFactory;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
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

import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.spark.SparkConf;
import org.apache.spark.executor.TaskMetrics;
import org.apache.spark.scheduler.*;
import org.apache.spark.storage.RDDInfo;
import org.crystalperf.common.IoCounters;
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
    static final String SCHEMA_VERSION = "1.3";
    private static final Pattern WRITE_PATH =
            Pattern.compile(
            "InsertIntoHadoopFsRelationCommand\\s*(?:\\nInput: [^\\n]*\\nArguments:)?\\s+(?:file:(?://)?)?(/[^,\\s\\]]+)");
    private static final Pattern SECRET = Pattern.compile("(?i)secret|password|token|credential|\\.key$|keystore|auth");

    private final SparkConf conf;
    private final boolean testing = "1".equals(System.getenv("CRYSTALPERF_TESTING"));

    private String appId = "unknown";
    private String appName = "";
    private String appAttempt;
    private String user;
    private double appStart = System.currentTimeMillis() / 1000.0;
    private final Map<Integer, Map<String, Object>> jobs = new TreeMap<>();
    private final Map<Integer, List<Integer>> jobStages = new HashMap<>();
    private final Map<Integer, StageInfo> stageInfos = new HashMap<>();
    private final Map<Integer, Map<String, Object>> stages = new TreeMap<>();
    private final Map<Integer, List<Map<String, Object>>> stageTasks = new HashMap<>();
    private final Map<String, Map<String, Object>> executors = new TreeMap<>();
    private final Map<Integer, Long> cachedBytes = new HashMap<>();
    private final Map<String, Double> totals = new TreeMap<>();
    private final List<String> warnings = new ArrayList<>();
    private final List<String> classpath = new ArrayList<>();
    private final Map<String, String> properties = new TreeMap<>();
    private final Map<String, String> sqlDescriptions = new HashMap<>();
    private String lastOutputDir;
    private boolean finished;

    /**
     * Bytes this process and its descendants (in local mode the PySpark daemon and workers) read from and
     * wrote to storage, and received and sent on the network, over the application (the trace's {@code io}):
     * the analysis derives the bandwidth the job saw from them. Null where it could not start.
     */
    private final IoCounters io;

    public CrystalPerfListener(SparkConf conf) {
        this.conf = conf;
        SampleStore.clear();
        IoCounters started = null;
        if (conf.getBoolean("spark.crystalperf.ioCounters", true)) {
            try {
                started = new IoCounters("driver").start();
            } catch (Throwable t) {
                LOG.log(Level.WARNING, "crystalperf: the I/O counters did not start (the job is not affected): " + t);
            }
        }
        io = started;
    }

    private void guard(String what, Runnable body) {
        try {
            body.run();
        } catch (Throwable t) {
            if (testing) {
                LOG.log(Level.SEVERE, "crystalperf: " + what + " failed", t);
                warnings.add(what + " failed: " + t);
            } else {
                LOG.log(Level.WARNING, "crystalperf: " + what + " failed (the job is not affected): " + t);
                warnings.add(what + " failed: " + t);
            }
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
                for (Tuple2<String, String> kv : CollectionConverters.asJava(props.get())) {
                    if (!SECRET.matcher(kv._1()).find()) {
                        properties.put(kv._1(), kv._2());
                    }
                }
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
            warnings.add("executor " + e.executorId() + " removed: " + e.reason());
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
                putIf(attrs, "call_site_long", p.getProperty("callSite.long"));
                putIf(attrs, "description", p.getProperty("spark.job.description"));
                putIf(attrs, "job_group", p.getProperty("spark.jobGroup.id"));
                putIf(attrs, "sql_execution_id", p.getProperty("spark.sql.execution.id"));
            }
            job.put("attributes", attrs);
            List<Integer> ids = new ArrayList<>();
            for (StageInfo si : CollectionConverters.asJava(e.stageInfos())) {
                ids.add(si.stageId());
                stageInfos.putIfAbsent(si.stageId(), si);
            }
            Collections.sort(ids);
            jobStages.put(e.jobId(), ids);
            jobs.put(e.jobId(), job);
        });
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
            job.put("status", ok ? "success" : "failed");
            if (!ok && e.jobResult() instanceof JobFailed) {
                warnings.add("job " + e.jobId() + " failed: " + ((JobFailed) e.jobResult()).exception());
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
            stageInfos.put(si.stageId(), si);
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
                st.put("failure", si.failureReason().get());
            }
            stageInfos.put(si.stageId(), si);
            for (RDDInfo rdd : CollectionConverters.asJava(si.rddInfos())) {
                long size = rdd.memSize() + rdd.diskSize();
                if (size > 0) {
                    cachedBytes.put(rdd.id(), size);
                }
            }
        });
    }

    @Override
    public synchronized void onTaskEnd(SparkListenerTaskEnd e) {
        guard("onTaskEnd", () -> {
            TaskInfo ti = e.taskInfo();
            Map<String, Object> task = new LinkedHashMap<>();
            task.put("id", Long.toString(ti.taskId()));
            task.put("index", ti.index());
            task.put("attempt", ti.attemptNumber());
            task.put("executor", ti.executorId());
            task.put("host", ti.host());
            double start = sec(ti.launchTime());
            double end = sec(ti.finishTime() > 0 ? ti.finishTime() : System.currentTimeMillis());
            task.put("start", start);
            task.put("end", Math.max(start, end));
            task.put("status", ti.successful() ? "success" : ti.killed() ? "killed" : ti.failed() ? "failed" : "unknown");
            Map<String, Double> m = metrics(e.taskMetrics());
            task.put("metrics", m);
            for (Map.Entry<String, Double> kv : m.entrySet()) {
                totals.merge(kv.getKey(), kv.getValue(), Double::sum);
            }
            stageTasks.computeIfAbsent(e.stageId(), k -> new ArrayList<>()).add(task);
        });
    }

    /** Every task metric, under the core's well-known names and under Spark's own. */
    static Map<String, Double> metrics(TaskMetrics t) {
        Map<String, Double> m = new LinkedHashMap<>();
        if (t == null) {
            return m;
        }
        m.put("run_time_s", t.executorRunTime() / 1000.0);
        m.put("cpu_time_s", t.executorCpuTime() / 1e9);
        m.put("gc_time_s", t.jvmGCTime() / 1000.0);
        m.put("network_wait_s", t.shuffleReadMetrics().fetchWaitTime() / 1000.0);
        m.put("disk_time_s", t.shuffleWriteMetrics().writeTime() / 1e9);
        m.put("input_bytes", (double) t.inputMetrics().bytesRead());
        m.put("output_bytes", (double) t.outputMetrics().bytesWritten());
        m.put("shuffle_read_bytes", (double) t.shuffleReadMetrics().totalBytesRead());
        m.put("shuffle_remote_read_bytes", (double) t.shuffleReadMetrics().remoteBytesRead());
        m.put("shuffle_write_bytes", (double) t.shuffleWriteMetrics().bytesWritten());
        m.put("spill_disk_bytes", (double) t.diskBytesSpilled());
        m.put("spill_memory_bytes", (double) t.memoryBytesSpilled());
        m.put("peak_memory_bytes", (double) t.peakExecutionMemory());
        m.put("records_in", (double) (t.inputMetrics().recordsRead() + t.shuffleReadMetrics().recordsRead()));
        m.put("records_out", (double) (t.outputMetrics().recordsWritten() + t.shuffleWriteMetrics().recordsWritten()));
        m.put("executorDeserializeTime", (double) t.executorDeserializeTime());
        m.put("executorDeserializeCpuTime", (double) t.executorDeserializeCpuTime());
        m.put("executorRunTime", (double) t.executorRunTime());
        m.put("executorCpuTime", (double) t.executorCpuTime());
        m.put("resultSize", (double) t.resultSize());
        m.put("jvmGCTime", (double) t.jvmGCTime());
        m.put("resultSerializationTime", (double) t.resultSerializationTime());
        m.put("memoryBytesSpilled", (double) t.memoryBytesSpilled());
        m.put("diskBytesSpilled", (double) t.diskBytesSpilled());
        m.put("peakExecutionMemory", (double) t.peakExecutionMemory());
        m.put("inputMetrics.bytesRead", (double) t.inputMetrics().bytesRead());
        m.put("inputMetrics.recordsRead", (double) t.inputMetrics().recordsRead());
        m.put("outputMetrics.bytesWritten", (double) t.outputMetrics().bytesWritten());
        m.put("outputMetrics.recordsWritten", (double) t.outputMetrics().recordsWritten());
        m.put("shuffleReadMetrics.remoteBlocksFetched", (double) t.shuffleReadMetrics().remoteBlocksFetched());
        m.put("shuffleReadMetrics.localBlocksFetched", (double) t.shuffleReadMetrics().localBlocksFetched());
        m.put("shuffleReadMetrics.fetchWaitTime", (double) t.shuffleReadMetrics().fetchWaitTime());
        m.put("shuffleReadMetrics.remoteBytesRead", (double) t.shuffleReadMetrics().remoteBytesRead());
        m.put("shuffleReadMetrics.remoteBytesReadToDisk", (double) t.shuffleReadMetrics().remoteBytesReadToDisk());
        m.put("shuffleReadMetrics.localBytesRead", (double) t.shuffleReadMetrics().localBytesRead());
        m.put("shuffleReadMetrics.recordsRead", (double) t.shuffleReadMetrics().recordsRead());
        m.put("shuffleWriteMetrics.bytesWritten", (double) t.shuffleWriteMetrics().bytesWritten());
        m.put("shuffleWriteMetrics.writeTime", (double) t.shuffleWriteMetrics().writeTime());
        m.put("shuffleWriteMetrics.recordsWritten", (double) t.shuffleWriteMetrics().recordsWritten());
        return m;
    }

    @Override
    public synchronized void onOtherEvent(SparkListenerEvent e) {
        guard("onOtherEvent", () -> {
            if (e.getClass().getName().endsWith("SparkListenerSQLExecutionStart")) {
                org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart start =
                        (org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart) e;
                sqlDescriptions.put(Long.toString(start.executionId()), start.description());
                String plan = start.physicalPlanDescription();
                Matcher m = WRITE_PATH.matcher(plan == null ? "" : plan);
                while (m.find()) {
                    Path out = Paths.get(m.group(1));
                    Path parent = out.getParent();
                    lastOutputDir = (parent != null ? parent : out).toString();
                }
            }
        });
    }

    @Override
    public synchronized void onApplicationEnd(SparkListenerApplicationEnd e) {
        if (finished) {
            return;
        }
        finished = true;
        double end = sec(e.time());
        File outDir = outputDir();
        File trace = null;
        try {
            trace = writeTrace(end, outDir);
        } catch (Throwable t) {
            if (testing) {
                LOG.log(Level.SEVERE, "crystalperf: writing the trace failed", t);
            }
            LOG.warning("crystalperf: could not write the trace to " + outDir + " (the job is not affected): " + t);
        }
        if (trace != null) {
            try {
                finishInPython(trace, outDir);
            } catch (Throwable t) {
                LOG.warning("crystalperf: the analysis did not run (the trace is kept; run `crystalperf analyze "
                        + trace + "`): " + t);
            }
        }
    }

    File outputDir() {
        String explicit = conf.get("spark.crystalperf.outputDir", "");
        String dir;
        String why;
        if (!explicit.isEmpty()) {
            dir = explicit.startsWith("file:") ? URI.create(explicit).getPath() : explicit;
            why = "spark.crystalperf.outputDir";
        } else if (lastOutputDir != null) {
            dir = lastOutputDir;
            why = "next to the application's last output";
        } else {
            dir = System.getProperty("user.dir");
            why = "the driver's working directory (set spark.crystalperf.outputDir to choose)";
        }
        LOG.warning("crystalperf: output directory " + dir + " (" + why + ")");
        return new File(dir);
    }

    private File writeTrace(double end, File outDir) throws Exception {
        // Local-mode executor: its last samples are taken synchronously, no RPC round trip needed.
        CrystalPerfPlugin.Sampler local = CrystalPerfPlugin.Sampler.local;
        if (local != null) {
            local.flush();
        }
        Map<String, Object> doc = buildTrace(end);
        Files.createDirectories(outDir.toPath());
        File target = new File(outDir, "crystalperf-trace.json.gz");
        File tmp = new File(outDir, "crystalperf-trace.json.gz.tmp");
        try (OutputStream out = new GZIPOutputStream(new FileOutputStream(tmp))) {
            new ObjectMapper().writeValue(out, doc);
        }
        Files.move(tmp.toPath(), target.toPath(), StandardCopyOption.REPLACE_EXISTING);
        LOG.warning("crystalperf: trace written to " + target);
        return target;
    }

    Map<String, Object> buildTrace(double end) {
        Map<String, Object> doc = new LinkedHashMap<>();
        String schemaVersion = conf.get("spark.crystalperf.schemaVersion", SCHEMA_VERSION);
        doc.put("schema_version", schemaVersion);
        doc.put("$schema", "urn:crystalperf:trace:" + schemaVersion);
        Map<String, Object> producer = new LinkedHashMap<>();
        producer.put("name", "crystalperf");
        producer.put("version", VERSION);
        producer.put("hook", "spark-listener");
        doc.put("producer", producer);

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
        app.put("status", anyFailed ? "failed" : "succeeded");
        app.put("output_dir", lastOutputDir);
        if (user != null) {
            app.put("user", user);
        }
        doc.put("application", app);
        doc.put("environment", environment());
        doc.put("operations", operations(end));
        Map<String, Object> samples = samples();
        if (samples != null) {
            doc.put("samples", samples);
        }
        Map<String, Double> metrics = new TreeMap<>();
        long cached = 0;
        for (long v : cachedBytes.values()) {
            cached += v;
        }
        metrics.put("cached_bytes", (double) cached);
        for (String k : new String[] {"spill_disk_bytes", "spill_memory_bytes", "shuffle_write_bytes",
                "shuffle_read_bytes", "input_bytes", "output_bytes"}) {
            metrics.put(k, totals.getOrDefault(k, 0.0));
        }
        List<IoCounters.Row> driverRows = io != null ? io.stop() : Collections.emptyList();
        IoCounters.Row lastRow = driverRows.isEmpty() ? null : driverRows.get(driverRows.size() - 1);
        // In local mode the executor is this process (its Python workers its descendants); on a cluster the
        // driver's I/O says nothing of the job's.
        if (localCores() > 0 && lastRow != null && lastRow.storageReadBytes != null) {
            metrics.put("storage_read_bytes", lastRow.storageReadBytes);
            metrics.put("storage_write_bytes", lastRow.storageWriteBytes);
        }
        doc.put("metrics", metrics);
        List<Map<String, Object>> ioRows = new ArrayList<>();
        for (IoCounters.Row row : driverRows) {
            ioRows.add(row.toMap());
        }
        ioRows.addAll(SampleStore.ioRows());
        doc.put("io", ioRows);
        doc.put("warnings", warnings);
        return doc;
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

    private List<Map<String, Object>> operations(double appEnd) {
        Map<Integer, Integer> owner = ranIn();
        ExecutorMeasures measured = new ExecutorMeasures();
        List<Map<String, Object>> ops = new ArrayList<>();
        for (Map.Entry<Integer, Map<String, Object>> je : jobs.entrySet()) {
            int jobId = je.getKey();
            Map<String, Object> job = je.getValue();
            double jstart = (Double) job.get("start");
            double jend = job.containsKey("end") ? (Double) job.get("end") : Math.max(jstart, appEnd);
            @SuppressWarnings("unchecked")
            Map<String, String> attrs = (Map<String, String>) job.get("attributes");
            Map<String, Object> op = new LinkedHashMap<>();
            op.put("id", "job-" + jobId);
            List<Integer> jobStageIds = jobStages.getOrDefault(jobId, Collections.emptyList());
            StageInfo result = jobStageIds.isEmpty() ? null : stageInfos.get(jobStageIds.get(jobStageIds.size() - 1));
            // SQL jobs carry no call site of their own; their result stage's name is the action's.
            String fallback = result != null ? result.name() : "job " + jobId;
            String sql = sqlDescriptions.get(attrs.get("sql_execution_id"));
            if (sql != null) {
                fallback = "SQL " + attrs.get("sql_execution_id") + ": " + sql;
            }
            String name = attrs.getOrDefault("description", attrs.getOrDefault("call_site", fallback));
            op.put("name", "job " + jobId + ": " + name);
            op.put("kind", "job");
            op.put("start", jstart);
            op.put("end", Math.max(jstart, jend));
            op.put("status", job.getOrDefault("status", "running"));
            op.put("attributes", attrs);
            List<Integer> sids = jobStages.getOrDefault(jobId, Collections.emptyList());
            List<Map<String, Object>> children = new ArrayList<>();
            for (int sid : sids) {
                children.add(stageOp(sid, jobId, sids, owner, jstart, measured, appEnd));
            }
            op.put("children", children);
            ops.add(op);
        }
        return ops;
    }

    /** What the executor plugin measured of each task (stageId TAB taskId), shipped with the samples. */
    private static final class ExecutorMeasures {
        final Map<String, Long> pythonWait = SampleStore.pythonWait();
        final double waitInterval = SampleStore.intervalMs() / 1000.0;
        final Map<String, Long> runQueueNs = SampleStore.runQueueNs();

        void addTo(int sid, Map<String, Object> task) {
            String key = sid + "\t" + task.get("id");
            @SuppressWarnings("unchecked")
            Map<String, Double> m = (Map<String, Double>) task.get("metrics");
            Long w = pythonWait.get(key);
            if (w != null) {
                m.put("python_worker_wait_s", w * waitInterval);
            }
            Long queued = runQueueNs.get(key);
            if (queued != null) {
                // A part of the run time, like the CPU time: the thread cannot be on a core and queued for
                // one at once. The plugin's task end comes after the run time's (the result is serialized
                // between them), hence the bound.
                double run = m.getOrDefault("run_time_s", 0.0);
                double cpu = m.getOrDefault("cpu_time_s", 0.0);
                m.put("cpu_wait_s", Math.max(0.0, Math.min(queued / 1e9, run - cpu)));
            }
        }
    }

    private static String stageId(int sid, boolean ran, int jobId) {
        return ran ? "stage-" + sid : "stage-" + sid + "-skipped-in-job-" + jobId;
    }

    private Map<String, Object> stageOp(int sid, int jobId, List<Integer> sids, Map<Integer, Integer> owner,
                                        double jstart, ExecutorMeasures measured, double appEnd) {
        StageInfo si = stageInfos.get(sid);
        Map<String, Object> st = stages.get(sid);
        boolean ran = st != null && Integer.valueOf(jobId).equals(owner.get(sid));
        Map<String, Object> op = new LinkedHashMap<>();
        op.put("id", stageId(sid, ran, jobId));
        op.put("name", "stage " + sid + ": " + (si != null ? si.name() : ""));
        op.put("kind", "stage");
        List<String> parents = new ArrayList<>();
        if (si != null) {
            for (Object p : CollectionConverters.asJava(si.parentIds())) {
                int pid = (Integer) p;
                if (sids.contains(pid)) {
                    boolean pran = stages.containsKey(pid) && Integer.valueOf(jobId).equals(owner.get(pid));
                    parents.add(stageId(pid, pran, jobId));
                }
            }
        }
        op.put("parents", parents);
        Map<String, String> attrs = new LinkedHashMap<>();
        if (ran) {
            double start = (Double) st.get("start");
            double end = st.containsKey("end") ? (Double) st.get("end") : Math.max(start, appEnd);
            op.put("start", start);
            op.put("end", Math.max(start, end));
            op.put("status", st.getOrDefault("status", "running"));
            if (st.containsKey("failure")) {
                attrs.put("failure", String.valueOf(st.get("failure")));
            }
            attrs.put("attempts", String.valueOf(st.getOrDefault("attempts", 1)));
            List<Map<String, Object>> tasks = stageTasks.getOrDefault(sid, Collections.emptyList());
            for (Map<String, Object> t : tasks) {
                measured.addTo(sid, t);
            }
            op.put("tasks", tasks);
        } else {
            op.put("start", jstart);
            op.put("end", jstart);
            op.put("status", "skipped");
        }
        if (si != null) {
            op.put("parallelism", Math.max(1, si.numTasks()));
            String details = si.details();
            if (details != null && !details.isEmpty()) {
                attrs.put("call_site", details.split("\n", 2)[0].trim());
            }
            StringBuilder lineage = new StringBuilder();
            for (RDDInfo rdd : CollectionConverters.asJava(si.rddInfos())) {
                if (lineage.length() > 0) {
                    lineage.append("; ");
                }
                lineage.append(rdd.id()).append(' ').append(rdd.name()).append(" @ ").append(rdd.callSite());
                List<Object> ps = CollectionConverters.asJava(rdd.parentIds());
                if (!ps.isEmpty()) {
                    lineage.append(" <- ").append(ps);
                }
            }
            attrs.put("rdd_lineage", lineage.toString());
        }
        op.put("attributes", attrs);
        return op;
    }

    private Map<String, Object> samples() {
        Map<String, Long> rows = SampleStore.rows();
        if (rows.isEmpty()) {
            return null;
        }
        long bucketMs = SampleStore.bucketMs();
        long originBucket = (long) Math.floor(appStart * 1000.0 / bucketMs);
        Map<String, Integer> frameIds = new HashMap<>();
        List<Map<String, Object>> frames = new ArrayList<>();
        Map<String, Integer> stackIds = new HashMap<>();
        List<List<Integer>> stacks = new ArrayList<>();
        List<String> states = new ArrayList<>();
        Map<String, Integer> keyIds = new HashMap<>();
        List<Map<String, Object>> keys = new ArrayList<>();
        Map<Integer, Integer> owner = ranIn();
        TreeMap<String, Long> agg = new TreeMap<>();
        List<Integer> keyCol = new ArrayList<>();
        List<Long> bucketCol = new ArrayList<>();
        List<Integer> stackCol = new ArrayList<>();
        List<Long> countCol = new ArrayList<>();
        for (Map.Entry<String, Long> row : rows.entrySet()) {
            // stage, task, bucket, thread state, encoded stack (SampleBatch's row key)
            String[] parts = row.getKey().split("\t", 5);
            int sid = Integer.parseInt(parts[0]);
            String k = parts[0] + "\t" + parts[1];
            Integer kid = keyIds.get(k);
            if (kid == null) {
                kid = keys.size();
                keyIds.put(k, kid);
                Map<String, Object> key = new LinkedHashMap<>();
                key.put("operation", "stage-" + sid);
                key.put("task", parts[1]);
                key.put("thread", "task");
                keys.add(key);
            }
            // A stack is its frames and the thread's state (trace schema 1.2).
            String stackKey = parts[3] + "\t" + parts[4];
            Integer stid = stackIds.get(stackKey);
            if (stid == null) {
                List<Integer> fs = new ArrayList<>();
                for (String f : parts[4].split("\u0001")) {
                    Integer fid = frameIds.get(f);
                    if (fid == null) {
                        fid = frames.size();
                        frameIds.put(f, fid);
                        frames.add(frame(f));
                    }
                    fs.add(fid);
                }
                stid = stacks.size();
                stackIds.put(stackKey, stid);
                stacks.add(fs);
                states.add(parts[3]);
            }
            keyCol.add(kid);
            bucketCol.add(Math.max(0, Long.parseLong(parts[2]) - originBucket));
            stackCol.add(stid);
            countCol.add(row.getValue());
        }
        Map<String, Object> s = new LinkedHashMap<>();
        s.put("interval_s", SampleStore.intervalMs() / 1000.0);
        s.put("bucket_s", bucketMs / 1000.0);
        s.put("origin", originBucket * bucketMs / 1000.0);
        s.put("frames", frames);
        s.put("stacks", stacks);
        s.put("states", states);
        s.put("keys", keys);
        s.put("key", keyCol);
        s.put("bucket", bucketCol);
        s.put("stack", stackCol);
        s.put("count", countCol);
        s.put("dropped", SampleStore.dropped());
        s.put("executors", new ArrayList<>(SampleStore.executors()));
        return s;
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
     * The Python side merges the PySpark workers' samples into the trace and runs the same analysis
     * as {@code crystalperf analyze}, in its own process: it must not count toward the job, and a crash
     * there must not reach the application. The command line is the one Python's
     * {@code INTEGRATION.finish_command(trace, "--out", dir, ...)} builds.
     */
    private void finishInPython(File trace, File outDir) throws Exception {
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
        if (!conf.getBoolean("spark.crystalperf.analysis", true)) {
            cmd.add("--no-analysis");
        }
        long timeout = conf.getLong("spark.crystalperf.analysisTimeoutS", 900);
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true);
        File log = new File(outDir, "crystalperf-analysis.log");
        pb.redirectOutput(log);
        Process p = pb.start();
        if (!p.waitFor(timeout, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            LOG.warning("crystalperf: the analysis took longer than " + timeout + " s and was stopped; see " + log);
            return;
        }
        if (p.exitValue() != 0) {
            LOG.warning("crystalperf: the analysis failed (exit " + p.exitValue() + "; the trace is kept: "
                    + trace + "); see " + log);
        } else {
            LOG.warning("crystalperf: report written to " + new File(outDir, "crystalperf-report.html"));
        }
    }
}
