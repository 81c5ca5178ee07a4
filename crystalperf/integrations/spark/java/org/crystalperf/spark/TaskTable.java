package org.crystalperf.spark;

import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;

import com.fasterxml.jackson.core.JsonGenerator;
import org.apache.spark.executor.TaskMetrics;

/**
 * The listener's tasks, bounded in bytes ({@code spark.crystalperf.maxTaskBytes}).
 *
 * Per stage: exact sums of every task metric over all its tasks (the trace's stage {@code metrics}), its task
 * count and failed/killed counts, and a uniform sample of its task records (Algorithm R). While all records fit
 * the budget every task is kept; when they would not, every stage's sample is cut to the same size (halved until
 * the total fits; at least one task a stage), so each stays a uniform sample of its tasks. A record is a few
 * primitives and one {@code long[]} of Spark's raw metric values; the trace's named metrics are derived from
 * them when it is written.
 *
 * Not thread-safe: the listener calls it under its own lock.
 */
final class TaskTable {
    static final long DEFAULT_MAX_BYTES = 32L << 20;
    /** Estimated bytes of one kept record: the object, its raw metrics array, its slot in the id index. */
    static final int RECORD_BYTES = 88 + (16 + 8 * Raw.COUNT) + 56;
    /** Measures (Python wait, run-queue delay) that arrived before their task's end, most recent kept. */
    static final int MAX_PENDING_MEASURES = 16_384;

    /** Indices into a record's raw values: what Spark's TaskMetrics holds, in its own units. */
    static final class Raw {
        static final int RUN_MS = 0;
        static final int CPU_NS = 1;
        static final int GC_MS = 2;
        static final int FETCH_WAIT_MS = 3;
        static final int SHUFFLE_WRITE_NS = 4;
        static final int INPUT_BYTES = 5;
        static final int INPUT_RECORDS = 6;
        static final int OUTPUT_BYTES = 7;
        static final int OUTPUT_RECORDS = 8;
        static final int REMOTE_BYTES = 9;
        static final int LOCAL_BYTES = 10;
        static final int REMOTE_TO_DISK_BYTES = 11;
        static final int SHUFFLE_RECORDS_READ = 12;
        static final int REMOTE_BLOCKS = 13;
        static final int LOCAL_BLOCKS = 14;
        static final int SHUFFLE_WRITE_BYTES = 15;
        static final int SHUFFLE_RECORDS_WRITTEN = 16;
        static final int DISK_SPILLED = 17;
        static final int MEMORY_SPILLED = 18;
        static final int PEAK_MEMORY = 19;
        static final int DESERIALIZE_MS = 20;
        static final int DESERIALIZE_CPU_NS = 21;
        static final int RESULT_SIZE = 22;
        static final int RESULT_SERIALIZATION_MS = 23;
        static final int COUNT = 24;

        private Raw() {}
    }

    static long[] raw(TaskMetrics t) {
        if (t == null) {
            return null;
        }
        long[] r = new long[Raw.COUNT];
        r[Raw.RUN_MS] = t.executorRunTime();
        r[Raw.CPU_NS] = t.executorCpuTime();
        r[Raw.GC_MS] = t.jvmGCTime();
        r[Raw.FETCH_WAIT_MS] = t.shuffleReadMetrics().fetchWaitTime();
        r[Raw.SHUFFLE_WRITE_NS] = t.shuffleWriteMetrics().writeTime();
        r[Raw.INPUT_BYTES] = t.inputMetrics().bytesRead();
        r[Raw.INPUT_RECORDS] = t.inputMetrics().recordsRead();
        r[Raw.OUTPUT_BYTES] = t.outputMetrics().bytesWritten();
        r[Raw.OUTPUT_RECORDS] = t.outputMetrics().recordsWritten();
        r[Raw.REMOTE_BYTES] = t.shuffleReadMetrics().remoteBytesRead();
        r[Raw.LOCAL_BYTES] = t.shuffleReadMetrics().localBytesRead();
        r[Raw.REMOTE_TO_DISK_BYTES] = t.shuffleReadMetrics().remoteBytesReadToDisk();
        r[Raw.SHUFFLE_RECORDS_READ] = t.shuffleReadMetrics().recordsRead();
        r[Raw.REMOTE_BLOCKS] = t.shuffleReadMetrics().remoteBlocksFetched();
        r[Raw.LOCAL_BLOCKS] = t.shuffleReadMetrics().localBlocksFetched();
        r[Raw.SHUFFLE_WRITE_BYTES] = t.shuffleWriteMetrics().bytesWritten();
        r[Raw.SHUFFLE_RECORDS_WRITTEN] = t.shuffleWriteMetrics().recordsWritten();
        r[Raw.DISK_SPILLED] = t.diskBytesSpilled();
        r[Raw.MEMORY_SPILLED] = t.memoryBytesSpilled();
        r[Raw.PEAK_MEMORY] = t.peakExecutionMemory();
        r[Raw.DESERIALIZE_MS] = t.executorDeserializeTime();
        r[Raw.DESERIALIZE_CPU_NS] = t.executorDeserializeCpuTime();
        r[Raw.RESULT_SIZE] = t.resultSize();
        r[Raw.RESULT_SERIALIZATION_MS] = t.resultSerializationTime();
        return r;
    }

    /**
     * Every task metric, under the core's well-known names and under Spark's own, from raw values (of one task,
     * or a stage's sums: every name is linear in them).
     */
    static Map<String, Double> named(long[] r) {
        Map<String, Double> m = new LinkedHashMap<>();
        if (r == null) {
            return m;
        }
        m.put("run_time_s", r[Raw.RUN_MS] / 1000.0);
        m.put("cpu_time_s", r[Raw.CPU_NS] / 1e9);
        m.put("gc_time_s", r[Raw.GC_MS] / 1000.0);
        m.put("network_wait_s", r[Raw.FETCH_WAIT_MS] / 1000.0);
        m.put("disk_time_s", r[Raw.SHUFFLE_WRITE_NS] / 1e9);
        m.put("input_bytes", (double) r[Raw.INPUT_BYTES]);
        m.put("output_bytes", (double) r[Raw.OUTPUT_BYTES]);
        m.put("shuffle_read_bytes", (double) (r[Raw.REMOTE_BYTES] + r[Raw.LOCAL_BYTES]));
        m.put("shuffle_remote_read_bytes", (double) r[Raw.REMOTE_BYTES]);
        m.put("shuffle_write_bytes", (double) r[Raw.SHUFFLE_WRITE_BYTES]);
        m.put("spill_disk_bytes", (double) r[Raw.DISK_SPILLED]);
        m.put("spill_memory_bytes", (double) r[Raw.MEMORY_SPILLED]);
        m.put("peak_memory_bytes", (double) r[Raw.PEAK_MEMORY]);
        m.put("records_in", (double) (r[Raw.INPUT_RECORDS] + r[Raw.SHUFFLE_RECORDS_READ]));
        m.put("records_out", (double) (r[Raw.OUTPUT_RECORDS] + r[Raw.SHUFFLE_RECORDS_WRITTEN]));
        m.put("executorDeserializeTime", (double) r[Raw.DESERIALIZE_MS]);
        m.put("executorDeserializeCpuTime", (double) r[Raw.DESERIALIZE_CPU_NS]);
        m.put("executorRunTime", (double) r[Raw.RUN_MS]);
        m.put("executorCpuTime", (double) r[Raw.CPU_NS]);
        m.put("resultSize", (double) r[Raw.RESULT_SIZE]);
        m.put("jvmGCTime", (double) r[Raw.GC_MS]);
        m.put("resultSerializationTime", (double) r[Raw.RESULT_SERIALIZATION_MS]);
        m.put("memoryBytesSpilled", (double) r[Raw.MEMORY_SPILLED]);
        m.put("diskBytesSpilled", (double) r[Raw.DISK_SPILLED]);
        m.put("peakExecutionMemory", (double) r[Raw.PEAK_MEMORY]);
        m.put("inputMetrics.bytesRead", (double) r[Raw.INPUT_BYTES]);
        m.put("inputMetrics.recordsRead", (double) r[Raw.INPUT_RECORDS]);
        m.put("outputMetrics.bytesWritten", (double) r[Raw.OUTPUT_BYTES]);
        m.put("outputMetrics.recordsWritten", (double) r[Raw.OUTPUT_RECORDS]);
        m.put("shuffleReadMetrics.remoteBlocksFetched", (double) r[Raw.REMOTE_BLOCKS]);
        m.put("shuffleReadMetrics.localBlocksFetched", (double) r[Raw.LOCAL_BLOCKS]);
        m.put("shuffleReadMetrics.fetchWaitTime", (double) r[Raw.FETCH_WAIT_MS]);
        m.put("shuffleReadMetrics.remoteBytesRead", (double) r[Raw.REMOTE_BYTES]);
        m.put("shuffleReadMetrics.remoteBytesReadToDisk", (double) r[Raw.REMOTE_TO_DISK_BYTES]);
        m.put("shuffleReadMetrics.localBytesRead", (double) r[Raw.LOCAL_BYTES]);
        m.put("shuffleReadMetrics.recordsRead", (double) r[Raw.SHUFFLE_RECORDS_READ]);
        m.put("shuffleWriteMetrics.bytesWritten", (double) r[Raw.SHUFFLE_WRITE_BYTES]);
        m.put("shuffleWriteMetrics.writeTime", (double) r[Raw.SHUFFLE_WRITE_NS]);
        m.put("shuffleWriteMetrics.recordsWritten", (double) r[Raw.SHUFFLE_RECORDS_WRITTEN]);
        return m;
    }

    static final byte SUCCESS = 0;
    static final byte FAILED = 1;
    static final byte KILLED = 2;
    static final byte UNKNOWN = 3;
    private static final String[] STATUS = {"success", "failed", "killed", "unknown"};

    /** One task as the trace writes it. */
    static final class Record {
        long id;
        int index;
        int attempt;
        int executor;  // into the table's strings
        int host;
        double start;
        double end;
        byte status;
        long pythonWaitSamples;
        long runQueueNs = -1;
        long[] raw;  // null: Spark sent no metrics
    }

    /** A stage's exact sums and its sample of task records. */
    static final class Stage {
        long taskCount;
        long failed;
        long killed;
        final long[] sums = new long[Raw.COUNT];
        boolean anyMetrics;
        long pythonWaitSamples;
        long runQueueNs;
        final ArrayList<Record> kept = new ArrayList<>();
    }

    private final long capacity;
    private int perStageCap = Integer.MAX_VALUE;
    private long keptTotal;
    private final Random random = new Random(0x5eed);
    private final Map<Integer, Stage> stages = new HashMap<>();
    private final Map<Long, Record> byId = new HashMap<>();
    private final LinkedHashMap<Long, long[]> pending = new LinkedHashMap<Long, long[]>() {
        @Override
        protected boolean removeEldestEntry(Map.Entry<Long, long[]> eldest) {
            return size() > MAX_PENDING_MEASURES;
        }
    };
    private final Map<String, Integer> stringIds = new HashMap<>();
    private final List<String> strings = new ArrayList<>();

    TaskTable(long budgetBytes) {
        this.capacity = Math.max(1, budgetBytes / RECORD_BYTES);
    }

    int intern(String s) {
        if (s == null) {
            return -1;
        }
        Integer id = stringIds.get(s);
        if (id == null) {
            id = strings.size();
            stringIds.put(s, id);
            strings.add(s);
        }
        return id;
    }

    Stage stage(int sid) {
        return stages.computeIfAbsent(sid, k -> new Stage());
    }

    Stage existing(int sid) {
        return stages.get(sid);
    }

    long kept() {
        return keptTotal;
    }

    /** A task ended: counted and summed into its stage, and its record offered to the stage's sample. */
    void add(int sid, Record rec) {
        Stage st = stage(sid);
        st.taskCount++;
        if (rec.status == FAILED) {
            st.failed++;
        } else if (rec.status == KILLED) {
            st.killed++;
        }
        if (rec.raw != null) {
            st.anyMetrics = true;
            for (int i = 0; i < Raw.COUNT; i++) {
                st.sums[i] += rec.raw[i];
            }
        }
        long[] early = pending.remove(rec.id);
        if (early != null) {
            rec.pythonWaitSamples += early[0];
            if (early[1] >= 0) {
                rec.runQueueNs = Math.max(0, rec.runQueueNs) + early[1];
            }
        }
        if (st.kept.size() < perStageCap) {
            keep(st, rec, -1);
        } else {
            long j = (long) (random.nextDouble() * st.taskCount);
            if (j < st.kept.size()) {
                keep(st, rec, (int) j);
            }
        }
        if (keptTotal > capacity) {
            shrink();
        }
    }

    private void keep(Stage st, Record rec, int replacing) {
        if (replacing < 0) {
            st.kept.add(rec);
            keptTotal++;
        } else {
            byId.remove(st.kept.get(replacing).id);
            st.kept.set(replacing, rec);
        }
        byId.put(rec.id, rec);
    }

    /** Halves the per-stage sample size until every kept record fits the budget (one a stage at least). */
    private void shrink() {
        while (keptTotal > capacity && perStageCap > 1) {
            int largest = 0;
            for (Stage st : stages.values()) {
                largest = Math.max(largest, st.kept.size());
            }
            perStageCap = Math.max(1, Math.min(perStageCap, largest) / 2);
            for (Stage st : stages.values()) {
                int n = st.kept.size();
                if (n <= perStageCap) {
                    continue;
                }
                // A uniform subset of a uniform sample is a uniform sample (partial Fisher-Yates).
                for (int i = 0; i < perStageCap; i++) {
                    int j = i + random.nextInt(n - i);
                    Record tmp = st.kept.get(i);
                    st.kept.set(i, st.kept.get(j));
                    st.kept.set(j, tmp);
                }
                for (int i = perStageCap; i < n; i++) {
                    byId.remove(st.kept.get(i).id);
                }
                st.kept.subList(perStageCap, n).clear();
                st.kept.trimToSize();
                keptTotal -= n - perStageCap;
            }
        }
    }

    /** A task's Python-worker wait samples and run-queue delay (-1: none) arrived from its executor. */
    void measured(int sid, long task, long pythonWaitSamples, long runQueueNs) {
        Stage st = stage(sid);
        st.pythonWaitSamples += pythonWaitSamples;
        if (runQueueNs > 0) {
            st.runQueueNs += runQueueNs;
        }
        Record rec = byId.get(task);
        if (rec != null) {
            rec.pythonWaitSamples += pythonWaitSamples;
            if (runQueueNs >= 0) {
                rec.runQueueNs = Math.max(0, rec.runQueueNs) + runQueueNs;
            }
            return;
        }
        // Before the task's end (a cluster executor sends as the task ends), or a task not kept.
        long[] m = pending.computeIfAbsent(task, k -> new long[] {0, -1});
        m[0] += pythonWaitSamples;
        if (runQueueNs >= 0) {
            m[1] = Math.max(0, m[1]) + runQueueNs;
        }
    }

    /** A task's named metrics, with what its executor measured. */
    Map<String, Double> metrics(Record rec, double waitInterval) {
        Map<String, Double> m = named(rec.raw);
        if (rec.pythonWaitSamples > 0) {
            m.put("python_worker_wait_s", rec.pythonWaitSamples * waitInterval);
        }
        if (rec.runQueueNs >= 0) {
            // A part of the run time, like the CPU time: the thread cannot be on a core and queued for one at
            // once. The plugin's task end comes after the run time's (the result is serialized between them),
            // hence the bound.
            double run = m.getOrDefault("run_time_s", 0.0);
            double cpu = m.getOrDefault("cpu_time_s", 0.0);
            m.put("cpu_wait_s", Math.max(0.0, Math.min(rec.runQueueNs / 1e9, run - cpu)));
        }
        return m;
    }

    /**
     * The stage's totals over all its tasks. The run-queue delay is exact (the sum of its tasks' bounded values)
     * while every task is kept; once sampled, the stage's delay bounded by its run time less its CPU time.
     */
    Map<String, Double> stageMetrics(Stage st, double waitInterval) {
        if (st.kept.size() == st.taskCount) {
            Map<String, Double> total = new LinkedHashMap<>();
            for (Record rec : st.kept) {
                for (Map.Entry<String, Double> e : metrics(rec, waitInterval).entrySet()) {
                    total.merge(e.getKey(), e.getValue(), Double::sum);
                }
            }
            return total;
        }
        Map<String, Double> m = st.anyMetrics ? named(st.sums) : new LinkedHashMap<>();
        if (st.pythonWaitSamples > 0) {
            m.put("python_worker_wait_s", st.pythonWaitSamples * waitInterval);
        }
        if (st.runQueueNs > 0) {
            double run = m.getOrDefault("run_time_s", 0.0);
            double cpu = m.getOrDefault("cpu_time_s", 0.0);
            m.put("cpu_wait_s", Math.max(0.0, Math.min(st.runQueueNs / 1e9, run - cpu)));
        }
        return m;
    }

    /** Sums of a metric over every stage (the trace's job-wide figures). */
    double total(String name) {
        double sum = 0;
        for (Stage st : stages.values()) {
            if (st.anyMetrics) {
                sum += named(st.sums).getOrDefault(name, 0.0);
            }
        }
        return sum;
    }

    void writeTask(JsonGenerator g, Record rec, double waitInterval) throws IOException {
        g.writeStartObject();
        g.writeStringField("id", Long.toString(rec.id));
        g.writeNumberField("index", rec.index);
        g.writeNumberField("attempt", rec.attempt);
        if (rec.executor >= 0) {
            g.writeStringField("executor", strings.get(rec.executor));
        }
        if (rec.host >= 0) {
            g.writeStringField("host", strings.get(rec.host));
        }
        g.writeNumberField("start", rec.start);
        g.writeNumberField("end", rec.end);
        g.writeStringField("status", STATUS[rec.status]);
        g.writeObjectFieldStart("metrics");
        for (Map.Entry<String, Double> e : metrics(rec, waitInterval).entrySet()) {
            g.writeNumberField(e.getKey(), e.getValue());
        }
        g.writeEndObject();
        g.writeEndObject();
    }
}
