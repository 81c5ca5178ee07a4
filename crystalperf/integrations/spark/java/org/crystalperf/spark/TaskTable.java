package org.crystalperf.spark;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
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
 * the total fits; at least one task a stage), so each stays a uniform sample of its tasks.
 *
 * A record is a row of primitives (its id, times, status, Spark's raw metric values...) in chunks of
 * {@link #CHUNK_ROWS} rows, allocated as the table grows to its budget and reused as records are replaced: a task's
 * end allocates nothing that outlives it, whatever the task count, and no chunk is large enough to be a humongous
 * object for G1 (half a region: 512 KB on a heap of 2 GB or less), so the driver's collector has no more to do on a
 * job of a million tasks than of a thousand. The trace's named metrics are derived from the raw values when it is
 * written.
 *
 * Not thread-safe: the listener calls it under its own lock.
 */
final class TaskTable {
    static final long DEFAULT_MAX_BYTES = 32L << 20;
    /** A row's longs: its id, start and end (double bits), Python-worker wait (ms), run-queue delay (ns), raw values. */
    private static final int ID = 0;
    private static final int START = 1;
    private static final int END = 2;
    private static final int PY_WAIT = 3;
    private static final int QUEUE = 4;
    private static final int RAW = 5;
    private static final int LONGS = RAW + 24;
    /** A row's ints: its partition index, attempt, executor and host (string ids), status. */
    private static final int INDEX = 0;
    private static final int ATTEMPT = 1;
    private static final int EXECUTOR = 2;
    private static final int HOST = 3;
    private static final int STATUS = 4;
    private static final int INTS = 5;
    static final int CHUNK_SHIFT = 9;
    static final int CHUNK_ROWS = 1 << CHUNK_SHIFT;
    private static final int CHUNK_MASK = CHUNK_ROWS - 1;
    /** Bytes of one kept record: its longs and ints, its slot in the id index (at half load) and its stage list's. */
    static final int RECORD_BYTES = 8 * LONGS + 4 * INTS + 2 * (8 + 4 + 1) + 4;
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

    /** Spark's metric values of a task into {@code r} (COUNT values from {@code at}); false when Spark sent none. */
    static boolean raw(TaskMetrics t, long[] r, int at) {
        if (t == null) {
            return false;
        }
        r[at + Raw.RUN_MS] = t.executorRunTime();
        r[at + Raw.CPU_NS] = t.executorCpuTime();
        r[at + Raw.GC_MS] = t.jvmGCTime();
        r[at + Raw.FETCH_WAIT_MS] = t.shuffleReadMetrics().fetchWaitTime();
        r[at + Raw.SHUFFLE_WRITE_NS] = t.shuffleWriteMetrics().writeTime();
        r[at + Raw.INPUT_BYTES] = t.inputMetrics().bytesRead();
        r[at + Raw.INPUT_RECORDS] = t.inputMetrics().recordsRead();
        r[at + Raw.OUTPUT_BYTES] = t.outputMetrics().bytesWritten();
        r[at + Raw.OUTPUT_RECORDS] = t.outputMetrics().recordsWritten();
        r[at + Raw.REMOTE_BYTES] = t.shuffleReadMetrics().remoteBytesRead();
        r[at + Raw.LOCAL_BYTES] = t.shuffleReadMetrics().localBytesRead();
        r[at + Raw.REMOTE_TO_DISK_BYTES] = t.shuffleReadMetrics().remoteBytesReadToDisk();
        r[at + Raw.SHUFFLE_RECORDS_READ] = t.shuffleReadMetrics().recordsRead();
        r[at + Raw.REMOTE_BLOCKS] = t.shuffleReadMetrics().remoteBlocksFetched();
        r[at + Raw.LOCAL_BLOCKS] = t.shuffleReadMetrics().localBlocksFetched();
        r[at + Raw.SHUFFLE_WRITE_BYTES] = t.shuffleWriteMetrics().bytesWritten();
        r[at + Raw.SHUFFLE_RECORDS_WRITTEN] = t.shuffleWriteMetrics().recordsWritten();
        r[at + Raw.DISK_SPILLED] = t.diskBytesSpilled();
        r[at + Raw.MEMORY_SPILLED] = t.memoryBytesSpilled();
        r[at + Raw.PEAK_MEMORY] = t.peakExecutionMemory();
        r[at + Raw.DESERIALIZE_MS] = t.executorDeserializeTime();
        r[at + Raw.DESERIALIZE_CPU_NS] = t.executorDeserializeCpuTime();
        r[at + Raw.RESULT_SIZE] = t.resultSize();
        r[at + Raw.RESULT_SERIALIZATION_MS] = t.resultSerializationTime();
        return true;
    }

    /** Spark's metric values of a task (null when Spark sent none). */
    static long[] raw(TaskMetrics t) {
        long[] r = new long[Raw.COUNT];
        return raw(t, r, 0) ? r : null;
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
    /** Set in a row's status when Spark sent no metrics for its task. */
    private static final byte NO_METRICS = 8;
    private static final String[] STATUS_NAMES = {"success", "failed", "killed", "unknown"};

    /** A stage's exact sums, and its sample of task records (row numbers). */
    static final class Stage {
        long taskCount;
        long failed;
        long killed;
        final long[] sums = new long[Raw.COUNT];
        boolean anyMetrics;
        long pythonWaitMs;
        /** Run-queue delay of the tasks it was measured for, each within its run time less its CPU time. */
        long queueNs;
        /** Those tasks' CPU time (ns), and how many they are. */
        long queueCpuNs;
        long queueTasks;
        int[] kept = new int[4];
        int keptCount;

        int kept(int i) {
            return kept[i];
        }
    }

    private final long capacity;
    private int perStageCap = Integer.MAX_VALUE;
    private long keptTotal;
    private final Random random = new Random(0x5eed);
    private final Map<Integer, Stage> stages = new HashMap<>();
    private final LongIntMap byId = new LongIntMap();
    private final LinkedHashMap<Long, long[]> pending = new LinkedHashMap<Long, long[]>() {
        @Override
        protected boolean removeEldestEntry(Map.Entry<Long, long[]> eldest) {
            return size() > MAX_PENDING_MEASURES;
        }
    };
    private final Map<String, Integer> stringIds = new HashMap<>();
    private final List<String> strings = new ArrayList<>();

    // the kept records, in chunks of rows; rows freed by a shrink are reused
    private int rows;
    private int[] free = new int[16];
    private int freeCount;
    private long[][] longs = new long[0][];
    private int[][] ints = new int[0][];

    /** The task being added ({@link #begin}, then {@link #add}): its raw values are written straight into a row. */
    private final long[] scratch = new long[Raw.COUNT];

    TaskTable(long budgetBytes) {
        this.capacity = Math.max(1, budgetBytes / RECORD_BYTES);
    }

    int intern(String s) {
        if (s == null) {
            return -1;
        }
        Integer sid = stringIds.get(s);
        if (sid == null) {
            sid = strings.size();
            stringIds.put(s, sid);
            strings.add(s);
        }
        return sid;
    }

    Stage stage(int sid) {
        Stage st = stages.get(sid);
        if (st == null) {
            st = new Stage();
            stages.put(sid, st);
        }
        return st;
    }

    Stage existing(int sid) {
        return stages.get(sid);
    }

    long kept() {
        return keptTotal;
    }

    /**
     * A task ended: counted and summed into its stage, and offered to the stage's sample. Nothing is allocated per
     * task (a new chunk of the columns now and then, while the table grows to its budget).
     */
    void add(int sid, long taskId, int taskIndex, int taskAttempt, String executorId, String hostName,
             double taskStart, double taskEnd, byte taskStatus, TaskMetrics metrics) {
        Stage st = stage(sid);
        st.taskCount++;
        if (taskStatus == FAILED) {
            st.failed++;
        } else if (taskStatus == KILLED) {
            st.killed++;
        }
        boolean hasMetrics = raw(metrics, scratch, 0);
        if (hasMetrics) {
            st.anyMetrics = true;
            for (int i = 0; i < Raw.COUNT; i++) {
                st.sums[i] += scratch[i];
            }
        }
        long[] early = pending.isEmpty() ? null : pending.remove(taskId);  // no boxing where none is waiting
        long waitMs = early != null ? early[0] : 0;
        long queued = early != null ? early[1] : -1;
        if (queued >= 0 && hasMetrics) {
            countQueue(st, queued, scratch, 0);
        }
        int row;
        if (st.keptCount < perStageCap) {
            row = newRow();
            keep(st, row, -1);
        } else {
            long j = (long) (random.nextDouble() * st.taskCount);
            if (j >= st.keptCount) {
                return;
            }
            row = st.kept[(int) j];
            byId.remove(longAt(row, ID));
            keep(st, row, (int) j);
        }
        long[] l = longs[row >>> CHUNK_SHIFT];
        int at = (row & CHUNK_MASK) * LONGS;
        l[at + ID] = taskId;
        l[at + START] = Double.doubleToRawLongBits(taskStart);
        l[at + END] = Double.doubleToRawLongBits(taskEnd);
        l[at + PY_WAIT] = waitMs;
        l[at + QUEUE] = queued;
        System.arraycopy(scratch, 0, l, at + RAW, Raw.COUNT);
        int[] n = ints[row >>> CHUNK_SHIFT];
        int in = (row & CHUNK_MASK) * INTS;
        n[in + INDEX] = taskIndex;
        n[in + ATTEMPT] = taskAttempt;
        n[in + EXECUTOR] = intern(executorId);
        n[in + HOST] = intern(hostName);
        n[in + STATUS] = taskStatus | (hasMetrics ? 0 : NO_METRICS);
        byId.put(taskId, row);
        if (keptTotal > capacity) {
            shrink();
        }
    }

    /** A measured task's delay in its stage's figures, bounded by its run time less its CPU time. */
    private static void countQueue(Stage st, long queued, long[] values, int at) {
        long runNs = values[at + Raw.RUN_MS] * 1_000_000L;
        long cpuNs = values[at + Raw.CPU_NS];
        st.queueNs += Math.max(0, Math.min(queued, runNs - cpuNs));
        st.queueCpuNs += Math.max(0, cpuNs);
        st.queueTasks++;
    }

    private int newRow() {
        if (freeCount > 0) {
            return free[--freeCount];
        }
        int chunk = rows >>> CHUNK_SHIFT;
        if (chunk == longs.length) {
            longs = Arrays.copyOf(longs, Math.max(4, 2 * longs.length));
            ints = Arrays.copyOf(ints, longs.length);
        }
        if (longs[chunk] == null) {
            longs[chunk] = new long[CHUNK_ROWS * LONGS];
            ints[chunk] = new int[CHUNK_ROWS * INTS];
        }
        return rows++;
    }

    private long longAt(int row, int field) {
        return longs[row >>> CHUNK_SHIFT][(row & CHUNK_MASK) * LONGS + field];
    }

    private void setLong(int row, int field, long value) {
        longs[row >>> CHUNK_SHIFT][(row & CHUNK_MASK) * LONGS + field] = value;
    }

    private int intAt(int row, int field) {
        return ints[row >>> CHUNK_SHIFT][(row & CHUNK_MASK) * INTS + field];
    }

    private void keep(Stage st, int row, int replacing) {
        if (replacing < 0) {
            if (st.keptCount == st.kept.length) {
                st.kept = Arrays.copyOf(st.kept, st.kept.length * 2);
            }
            st.kept[st.keptCount++] = row;
            keptTotal++;
        } else {
            st.kept[replacing] = row;
        }
    }

    /** Halves the per-stage sample size until every kept record fits the budget (one a stage at least). */
    private void shrink() {
        while (keptTotal > capacity && perStageCap > 1) {
            int largest = 0;
            for (Stage st : stages.values()) {
                largest = Math.max(largest, st.keptCount);
            }
            perStageCap = Math.max(1, Math.min(perStageCap, largest) / 2);
            for (Stage st : stages.values()) {
                int n = st.keptCount;
                if (n <= perStageCap) {
                    continue;
                }
                // A uniform subset of a uniform sample is a uniform sample (partial Fisher-Yates).
                for (int i = 0; i < perStageCap; i++) {
                    int j = i + random.nextInt(n - i);
                    int tmp = st.kept[i];
                    st.kept[i] = st.kept[j];
                    st.kept[j] = tmp;
                }
                for (int i = perStageCap; i < n; i++) {
                    int row = st.kept[i];
                    byId.remove(longAt(row, ID));
                    if (freeCount == free.length) {
                        free = Arrays.copyOf(free, free.length * 2);
                    }
                    free[freeCount++] = row;
                }
                st.keptCount = perStageCap;
                st.kept = Arrays.copyOf(st.kept, Math.max(4, perStageCap));
                keptTotal -= n - perStageCap;
            }
        }
        if (freeCount >= CHUNK_ROWS) {
            compact();
        }
    }

    /** Moves the kept rows to the front and lets the chunks they left go: the heap follows what is kept. */
    private void compact() {
        long[][] movedLongs = new long[Math.max(4, (int) ((keptTotal + CHUNK_MASK) >>> CHUNK_SHIFT))][];
        int[][] movedInts = new int[movedLongs.length][];
        int next = 0;
        for (Stage st : stages.values()) {
            for (int k = 0; k < st.keptCount; k++) {
                int row = st.kept[k];
                int chunk = next >>> CHUNK_SHIFT;
                if (movedLongs[chunk] == null) {
                    movedLongs[chunk] = new long[CHUNK_ROWS * LONGS];
                    movedInts[chunk] = new int[CHUNK_ROWS * INTS];
                }
                System.arraycopy(longs[row >>> CHUNK_SHIFT], (row & CHUNK_MASK) * LONGS, movedLongs[chunk],
                        (next & CHUNK_MASK) * LONGS, LONGS);
                System.arraycopy(ints[row >>> CHUNK_SHIFT], (row & CHUNK_MASK) * INTS, movedInts[chunk],
                        (next & CHUNK_MASK) * INTS, INTS);
                st.kept[k] = next;
                next++;
            }
        }
        longs = movedLongs;
        ints = movedInts;
        rows = next;
        freeCount = 0;
        free = new int[16];
        byId.clear();
        for (int row = 0; row < rows; row++) {
            byId.put(longAt(row, ID), row);
        }
    }

    /** A task's Python-worker wait (ms) and run-queue delay (ns, -1: none) arrived from its executor. */
    void measured(int sid, long task, long pythonWait, long queued) {
        Stage st = stage(sid);
        st.pythonWaitMs += pythonWait;
        int row = byId.get(task);
        if (row >= 0) {
            setLong(row, PY_WAIT, longAt(row, PY_WAIT) + pythonWait);
            if (queued >= 0) {
                if ((intAt(row, STATUS) & NO_METRICS) == 0) {
                    countQueue(st, queued, longs[row >>> CHUNK_SHIFT], (row & CHUNK_MASK) * LONGS + RAW);
                }
                setLong(row, QUEUE, Math.max(0, longAt(row, QUEUE)) + queued);
            }
            return;
        }
        // Before the task's end (a cluster executor sends as the task ends), or a task not kept.
        long[] m = pending.computeIfAbsent(task, k -> new long[] {0, -1});
        m[0] += pythonWait;
        if (queued >= 0) {
            m[1] = Math.max(0, m[1]) + queued;
        }
    }

    /** A row's named metrics, with what its executor measured. */
    private Map<String, Double> metrics(int row) {
        int at = (row & CHUNK_MASK) * LONGS;
        Map<String, Double> m = (intAt(row, STATUS) & NO_METRICS) != 0 ? new LinkedHashMap<>()
                : named(Arrays.copyOfRange(longs[row >>> CHUNK_SHIFT], at + RAW, at + RAW + Raw.COUNT));
        long pythonWaitMs = longAt(row, PY_WAIT);
        long queueNs = longAt(row, QUEUE);
        if (pythonWaitMs > 0) {
            m.put("python_worker_wait_s", pythonWaitMs / 1000.0);
        }
        if (queueNs >= 0) {
            // A part of the run time, like the CPU time: the thread cannot be on a core and queued for one at
            // once. The plugin's task end comes after the run time's (the result is serialized between them),
            // hence the bound.
            double run = m.getOrDefault("run_time_s", 0.0);
            double cpu = m.getOrDefault("cpu_time_s", 0.0);
            m.put("cpu_wait_s", Math.max(0.0, Math.min(queueNs / 1e9, run - cpu)));
        }
        return m;
    }

    /**
     * The stage's totals over all its tasks. The run-queue delay is measured for a sample of the tasks (the plugin
     * picks one a sampling round a task thread): exact where every task was measured, else their delay per CPU
     * second scaled to the stage's CPU time, within its run time less its CPU time.
     */
    Map<String, Double> stageMetrics(Stage st) {
        Map<String, Double> m = st.anyMetrics ? named(st.sums) : new LinkedHashMap<>();
        if (st.pythonWaitMs > 0) {
            m.put("python_worker_wait_s", st.pythonWaitMs / 1000.0);
        }
        if (st.queueTasks > 0) {
            double waited = st.queueNs / 1e9;
            double cpu = m.getOrDefault("cpu_time_s", 0.0);
            if (st.queueTasks < st.taskCount && st.queueCpuNs > 0) {
                waited *= cpu / (st.queueCpuNs / 1e9);
            }
            double run = m.getOrDefault("run_time_s", 0.0);
            m.put("cpu_wait_s", Math.max(0.0, Math.min(waited, run - cpu)));
        }
        return m;
    }

    /** How many of the stage's tasks had their run-queue delay measured. */
    long queueMeasured(Stage st) {
        return st.queueTasks;
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

    void writeTask(JsonGenerator g, int row) throws IOException {
        g.writeStartObject();
        g.writeStringField("id", Long.toString(longAt(row, ID)));
        g.writeNumberField("index", intAt(row, INDEX));
        g.writeNumberField("attempt", intAt(row, ATTEMPT));
        if (intAt(row, EXECUTOR) >= 0) {
            g.writeStringField("executor", strings.get(intAt(row, EXECUTOR)));
        }
        if (intAt(row, HOST) >= 0) {
            g.writeStringField("host", strings.get(intAt(row, HOST)));
        }
        g.writeNumberField("start", Double.longBitsToDouble(longAt(row, START)));
        g.writeNumberField("end", Double.longBitsToDouble(longAt(row, END)));
        g.writeStringField("status", STATUS_NAMES[intAt(row, STATUS) & 3]);
        g.writeObjectFieldStart("metrics");
        for (Map.Entry<String, Double> e : metrics(row).entrySet()) {
            g.writeNumberField(e.getKey(), e.getValue());
        }
        g.writeEndObject();
        g.writeEndObject();
    }

    /**
     * long -> int (task id -> row), open addressing with linear probing and backward-shift deletion: no object per
     * entry, so a million task ids cost two arrays.
     */
    static final class LongIntMap {
        private long[] keys = new long[16];
        private int[] values = new int[16];
        private boolean[] used = new boolean[16];
        private int size;

        private static int hash(long k, int mask) {
            long h = k * 0x9E3779B97F4A7C15L;
            return (int) (h ^ (h >>> 32)) & mask;
        }

        int get(long k) {
            int mask = keys.length - 1;
            for (int i = hash(k, mask); used[i]; i = (i + 1) & mask) {
                if (keys[i] == k) {
                    return values[i];
                }
            }
            return -1;
        }

        void put(long k, int v) {
            if ((size + 1) * 2 > keys.length) {
                rehash(keys.length * 2);
            }
            int mask = keys.length - 1;
            int i = hash(k, mask);
            while (used[i]) {
                if (keys[i] == k) {
                    values[i] = v;
                    return;
                }
                i = (i + 1) & mask;
            }
            used[i] = true;
            keys[i] = k;
            values[i] = v;
            size++;
        }

        void remove(long k) {
            int mask = keys.length - 1;
            int i = hash(k, mask);
            while (used[i] && keys[i] != k) {
                i = (i + 1) & mask;
            }
            if (!used[i]) {
                return;
            }
            // shift back the entries after the hole whose home is at or before it
            int hole = i;
            for (int j = (i + 1) & mask; used[j]; j = (j + 1) & mask) {
                int home = hash(keys[j], mask);
                boolean movable = hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
                if (movable) {
                    keys[hole] = keys[j];
                    values[hole] = values[j];
                    hole = j;
                }
            }
            used[hole] = false;
            size--;
        }

        int size() {
            return size;
        }

        void clear() {
            keys = new long[16];
            values = new int[16];
            used = new boolean[16];
            size = 0;
        }

        private void rehash(int capacity) {
            long[] oldKeys = keys;
            int[] oldValues = values;
            boolean[] oldUsed = used;
            keys = new long[capacity];
            values = new int[capacity];
            used = new boolean[capacity];
            size = 0;
            for (int i = 0; i < oldKeys.length; i++) {
                if (oldUsed[i]) {
                    put(oldKeys[i], oldValues[i]);
                }
            }
        }
    }
}
