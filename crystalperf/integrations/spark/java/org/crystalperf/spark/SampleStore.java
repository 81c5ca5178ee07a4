package org.crystalperf.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicLong;

import org.crystalperf.common.IoCounters;

/**
 * Driver-side store of the aggregated stack samples shipped by every executor's sampler.
 * A static singleton because the listener and the driver plugin are created separately by Spark
 * but live in the same driver JVM.
 *
 * Bounded in bytes ({@code spark.crystalperf.maxSampleBytes}): every frame is kept once (its encoded text),
 * every stack once (an array of frame ids plus its thread state), and a row is five primitives in columns
 * (stage, task, bucket, stack id, count) found through an open-addressing index. Rows that would pass the
 * budget are counted as dropped samples.
 */
public final class SampleStore {
    static final long DEFAULT_MAX_BYTES = 16L << 20;
    /** Bytes of one row's five columns; charged as the columns grow (the index too, 4 bytes a slot). */
    static final int ROW_BYTES = 4 + 8 + 8 + 4 + 8;
    /** Per interned frame / stack, on top of its characters or frame ids: the map entry, list slot, headers. */
    static final int ENTRY_BYTES = 96;

    /** An int array usable as a map key (a stack: its frame ids, and its state last on the executor). */
    static final class IntArray {
        final int[] a;
        private final int hash;

        IntArray(int[] a) {
            this.a = a;
            this.hash = Arrays.hashCode(a);
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof IntArray && Arrays.equals(a, ((IntArray) o).a);
        }

        @Override
        public int hashCode() {
            return hash;
        }
    }

    /**
     * Where the per-task measures go (the listener of the running application): a shipment's at once, so the
     * listener takes its lock (which Spark's listener bus contends for) once a shipment, not once a task.
     */
    interface TaskMeasureSink {
        void measured(int[] stage, long[] task, long[] pythonWaitMs, long[] runQueueNs);
    }

    private static long maxBytes = DEFAULT_MAX_BYTES;
    private static long bytes;
    private static final Map<String, Integer> FRAME_IDS = new HashMap<>();
    private static final List<String> FRAMES = new ArrayList<>();
    private static final Map<IntArray, Integer> STACK_IDS = new HashMap<>();
    private static final List<int[]> STACKS = new ArrayList<>();
    private static final List<String> STATES = new ArrayList<>();
    // the rows, in columns
    private static int[] index = new int[0];  // row + 1, 0 = free
    private static int rowCount;
    private static int[] rowStage = new int[0];
    private static long[] rowTask = new long[0];
    private static long[] rowBucket = new long[0];
    private static int[] rowStack = new int[0];
    private static long[] rowSamples = new long[0];

    private static final Map<String, Boolean> EXECUTORS = new HashMap<>();
    /** Executor id -> its latest hook cost report (cumulative: the latest says all). */
    private static final Map<String, HookReport> HOOK = new TreeMap<>();
    private static final AtomicLong DROPPED = new AtomicLong();
    /** Executor source -> its I/O counter rows, oldest first (bounded like the executor's own buffer). */
    private static final Map<String, List<Map<String, Object>>> IO = new TreeMap<>();
    static final int MAX_IO_SOURCES = 1024;
    static final int MAX_EXECUTORS = 100_000;
    private static volatile long intervalMs = 100;
    private static volatile long bucketMs = 1000;
    private static volatile TaskMeasureSink sink;

    private SampleStore() {}

    /** The byte budget of the rows and the stack table (the listener sets it from its configuration). */
    static synchronized void configure(long budgetBytes, TaskMeasureSink measures) {
        maxBytes = Math.max(1L << 16, budgetBytes);
        sink = measures;
    }

    static void add(SampleBatch batch) {
        addSamples(batch);
        if (batch.hook != null) {
            addHook(batch.executorId, batch.hook);
        }
        TaskMeasureSink to = sink;
        if (to == null || batch.taskId == null) {
            return;
        }
        // Outside the store's lock: the listener takes its own, and calls the store while holding it.
        if (batch.taskId.length > 0) {
            to.measured(batch.taskStage, batch.taskId, batch.taskPythonWaitMs, batch.taskRunQueueNs);
        }
    }

    private static synchronized void addSamples(SampleBatch batch) {
        intervalMs = batch.intervalMs;
        bucketMs = batch.bucketMs;
        if (batch.executorId != null && EXECUTORS.size() < MAX_EXECUTORS) {  // null: the driver's own sampler
            EXECUTORS.put(batch.executorId, Boolean.TRUE);
        }
        DROPPED.addAndGet(batch.dropped);
        if (batch.rowStack == null || batch.rowStack.length == 0) {
            return;
        }
        int[] frameMap = new int[batch.frames.length];
        Arrays.fill(frameMap, -2);  // -2: not looked up yet, -1: over the budget
        int[] stackMap = new int[batch.stacks.length];
        Arrays.fill(stackMap, -2);
        for (int r = 0; r < batch.rowStack.length; r++) {
            int local = batch.rowStack[r];
            int stack = local >= 0 && local < stackMap.length ? stackMap[local] : -1;
            if (stack == -2) {
                stack = internStack(batch, local, frameMap);
                stackMap[local] = stack;
            }
            if (stack < 0 || !addRow(batch.rowStage[r], batch.rowTask[r], batch.rowBucket[r], stack,
                    batch.rowCount[r])) {
                DROPPED.addAndGet(batch.rowCount[r]);
            }
        }
    }

    private static int internStack(SampleBatch batch, int local, int[] frameMap) {
        int[] frames = batch.stacks[local];
        if (frames == null) {
            return -1;
        }
        int[] ids = new int[frames.length];
        for (int i = 0; i < frames.length; i++) {
            int f = frames[i];
            if (f < 0 || f >= frameMap.length) {
                return -1;
            }
            if (frameMap[f] == -2) {
                frameMap[f] = internFrame(batch.frames[f]);
            }
            if (frameMap[f] < 0) {
                return -1;
            }
            ids[i] = frameMap[f];
        }
        String state = local < batch.states.length && batch.states[local] != null ? batch.states[local] : "";
        // The state is part of the stack's identity (trace schema 1.2): kept as one more id, past the frames.
        int[] key = Arrays.copyOf(ids, ids.length + 1);
        key[ids.length] = stateId(state);
        IntArray k = new IntArray(key);
        Integer id = STACK_IDS.get(k);
        if (id != null) {
            return id;
        }
        long cost = ENTRY_BYTES + 4L * key.length;
        if (bytes + cost > maxBytes) {
            return -1;
        }
        bytes += cost;
        id = STACKS.size();
        STACK_IDS.put(k, id);
        STACKS.add(key);
        return id;
    }

    private static final List<String> STATE_NAMES = new ArrayList<>();

    private static int stateId(String state) {
        int i = STATE_NAMES.indexOf(state);
        if (i < 0 && STATE_NAMES.size() < 16) {
            STATE_NAMES.add(state);
            i = STATE_NAMES.size() - 1;
        }
        return Math.max(0, i);
    }

    private static int internFrame(String encoded) {
        if (encoded == null) {
            return -1;
        }
        Integer id = FRAME_IDS.get(encoded);
        if (id != null) {
            return id;
        }
        long cost = ENTRY_BYTES + 2L * encoded.length();
        if (bytes + cost > maxBytes) {
            return -1;
        }
        bytes += cost;
        id = FRAMES.size();
        FRAME_IDS.put(encoded, id);
        FRAMES.add(encoded);
        return id;
    }

    private static int slot(int stage, long task, long bucket, int stack, int mask) {
        long h = ((stage * 0x9E3779B97F4A7C15L + task) * 0x9E3779B97F4A7C15L + bucket) * 0x9E3779B97F4A7C15L + stack;
        return (int) (h ^ (h >>> 29)) & mask;
    }

    private static boolean addRow(int stage, long task, long bucket, int stack, long count) {
        if (index.length > 0) {
            int mask = index.length - 1;
            for (int i = slot(stage, task, bucket, stack, mask); index[i] != 0; i = (i + 1) & mask) {
                int r = index[i] - 1;
                if (rowStage[r] == stage && rowTask[r] == task && rowBucket[r] == bucket && rowStack[r] == stack) {
                    rowSamples[r] += count;
                    return true;
                }
            }
        }
        if (rowCount == rowStage.length) {
            int grown = Math.max(1024, rowCount * 2);
            // the columns and the index grow together: charged before, refused past the budget
            long cost = (long) (grown - rowCount) * ROW_BYTES + 4L * Math.max(0, 2 * grown - index.length);
            if (bytes + cost > maxBytes) {
                return false;
            }
            bytes += cost;
            rowStage = Arrays.copyOf(rowStage, grown);
            rowTask = Arrays.copyOf(rowTask, grown);
            rowBucket = Arrays.copyOf(rowBucket, grown);
            rowStack = Arrays.copyOf(rowStack, grown);
            rowSamples = Arrays.copyOf(rowSamples, grown);
        }
        if ((rowCount + 1) * 2 > index.length) {
            index = new int[Math.max(2048, 2 * rowStage.length)];
            int mask = index.length - 1;
            for (int r = 0; r < rowCount; r++) {
                int i = slot(rowStage[r], rowTask[r], rowBucket[r], rowStack[r], mask);
                while (index[i] != 0) {
                    i = (i + 1) & mask;
                }
                index[i] = r + 1;
            }
        }
        int r = rowCount++;
        rowStage[r] = stage;
        rowTask[r] = task;
        rowBucket[r] = bucket;
        rowStack[r] = stack;
        rowSamples[r] = count;
        int mask = index.length - 1;
        int i = slot(stage, task, bucket, stack, mask);
        while (index[i] != 0) {
            i = (i + 1) & mask;
        }
        index[i] = r + 1;
        return true;
    }

    /**
     * The tables at one instant. Executors may still ship batches while the trace is written: frames, stacks and
     * rows copied one after the other could then hold a row whose stack (or a stack whose frame) came later.
     */
    static final class Snapshot {
        final List<String> frames;
        final List<int[]> stacks;
        final List<String> states;
        final int[] stage;
        final long[] task;
        final long[] bucket;
        final int[] stack;
        final long[] count;

        private Snapshot(List<String> frames, List<int[]> stacks, List<String> states, int rows) {
            this.frames = frames;
            this.stacks = stacks;
            this.states = states;
            this.stage = Arrays.copyOf(rowStage, rows);
            this.task = Arrays.copyOf(rowTask, rows);
            this.bucket = Arrays.copyOf(rowBucket, rows);
            this.stack = Arrays.copyOf(rowStack, rows);
            this.count = Arrays.copyOf(rowSamples, rows);
        }

        int rows() {
            return stage.length;
        }
    }

    static synchronized int rowCount() {
        return rowCount;
    }

    static synchronized Snapshot snapshot() {
        return new Snapshot(frames(), stacks(), states(), rowCount);
    }

    static synchronized List<String> frames() { return new ArrayList<>(FRAMES); }

    /** Per stack: its frame ids (innermost first). */
    static synchronized List<int[]> stacks() {
        List<int[]> out = new ArrayList<>(STACKS.size());
        for (int[] s : STACKS) {
            out.add(Arrays.copyOf(s, s.length - 1));
        }
        return out;
    }

    static synchronized List<String> states() {
        List<String> out = new ArrayList<>(STACKS.size());
        for (int[] s : STACKS) {
            out.add(STATE_NAMES.get(s[s.length - 1]));
        }
        return out;
    }

    static synchronized long bytes() { return bytes; }

    static synchronized void add(IoBatch batch) {
        List<Map<String, Object>> rows = IO.get(batch.source);
        if (rows == null) {
            if (IO.size() >= MAX_IO_SOURCES) {
                return;
            }
            rows = new ArrayList<>();
            IO.put(batch.source, rows);
        }
        // a source's rows stay in time order, each once, whatever order its batches arrive in
        double last = rows.isEmpty() ? Double.NEGATIVE_INFINITY : time(rows.get(rows.size() - 1));
        boolean ordered = true;
        for (Map<String, Object> row : batch.documents()) {
            ordered &= time(row) > last;
            last = Math.max(last, time(row));
            rows.add(row);
        }
        if (!ordered) {
            rows.sort(java.util.Comparator.comparingDouble(SampleStore::time));
            List<Map<String, Object>> once = new ArrayList<>(rows.size());
            for (Map<String, Object> row : rows) {
                if (once.isEmpty() || time(once.get(once.size() - 1)) < time(row)) {
                    once.add(row);
                }
            }
            rows.clear();
            rows.addAll(once);
        }
        while (rows.size() >= IoCounters.MAX_ROWS) {
            // as the executor's sampler does when full: every other row, the last one kept
            List<Map<String, Object>> halved = new ArrayList<>();
            for (int i = 0; i < rows.size() - 1; i += 2) {
                halved.add(rows.get(i));
            }
            halved.add(rows.get(rows.size() - 1));
            rows.clear();
            rows.addAll(halved);
        }
    }

    private static double time(Map<String, Object> row) {
        Object t = row.get("t");
        return t instanceof Number ? ((Number) t).doubleValue() : Double.NEGATIVE_INFINITY;
    }

    /** Every executor's I/O counter rows (the driver's own are the listener's). */
    static synchronized List<Map<String, Object>> ioRows() {
        List<Map<String, Object>> all = new ArrayList<>();
        for (List<Map<String, Object>> rows : IO.values()) {
            all.addAll(rows);
        }
        return all;
    }

    private static synchronized void addHook(String executorId, HookReport report) {
        if (HOOK.containsKey(executorId) || HOOK.size() < MAX_EXECUTORS) {
            HOOK.put(executorId, report);
        }
    }

    /** An executor's latest hook cost report; null: none came. */
    static synchronized HookReport hookReport(String executorId) {
        return HOOK.get(executorId);
    }

    /** Every cluster executor's latest hook cost report (source: its executor id). */
    static synchronized List<HookReport> hookReports() {
        List<HookReport> out = new ArrayList<>();
        for (Map.Entry<String, HookReport> e : HOOK.entrySet()) {
            out.add(e.getValue().as(e.getKey()));
        }
        return out;
    }

    static synchronized java.util.Set<String> executors() { return new java.util.TreeSet<>(EXECUTORS.keySet()); }
    static long dropped() { return DROPPED.get(); }
    static long intervalMs() { return intervalMs; }
    static long bucketMs() { return bucketMs; }

    /** A new application in the same JVM (tests run several) starts from an empty store. */
    static synchronized void clear() {
        FRAME_IDS.clear();
        FRAMES.clear();
        STACK_IDS.clear();
        STACKS.clear();
        STATE_NAMES.clear();
        index = new int[0];
        rowCount = 0;
        rowStage = new int[0];
        rowTask = new long[0];
        rowBucket = new long[0];
        rowStack = new int[0];
        rowSamples = new long[0];
        bytes = 0;
        EXECUTORS.clear();
        HOOK.clear();
        IO.clear();
        DROPPED.set(0);
        sink = null;
    }
}
