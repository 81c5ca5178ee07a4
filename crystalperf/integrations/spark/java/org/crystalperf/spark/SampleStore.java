package org.crystalperf.spark;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicLong;

import org.crystalperf.common.IoCounters;

/**
 * Driver-side store of the aggregated stack samples shipped by every executor's sampler.
 * A static singleton because the listener and the driver plugin are created separately by Spark
 * but live in the same driver JVM; rows are bounded so a long application cannot exhaust memory.
 */
public final class SampleStore {
    static final int MAX_ROWS = 500_000;
    private static final Map<String, Long> ROWS = new HashMap<>();
    private static final Map<String, Long> PYTHON_WAIT = new HashMap<>();
    private static final Map<String, Long> RUN_QUEUE_NS = new HashMap<>();
    private static final Map<String, Boolean> EXECUTORS = new HashMap<>();
    private static final AtomicLong DROPPED = new AtomicLong();
    /** Executor source -> its I/O counter rows, oldest first (bounded like the executor's own buffer). */
    private static final Map<String, List<Map<String, Object>>> IO = new TreeMap<>();
    static final int MAX_IO_SOURCES = 1024;
    private static volatile long intervalMs = 100;
    private static volatile long bucketMs = 1000;

    private SampleStore() {}

    static synchronized void add(SampleBatch batch) {
        intervalMs = batch.intervalMs;
        bucketMs = batch.bucketMs;
        EXECUTORS.put(batch.executorId, Boolean.TRUE);
        for (Map.Entry<String, Long> e : batch.rows.entrySet()) {
            Long old = ROWS.get(e.getKey());
            if (old != null) {
                ROWS.put(e.getKey(), old + e.getValue());
            } else if (ROWS.size() < MAX_ROWS) {
                ROWS.put(e.getKey(), e.getValue());
            } else {
                DROPPED.addAndGet(e.getValue());
            }
        }
        for (Map.Entry<String, Long> e : batch.pythonWait.entrySet()) {
            PYTHON_WAIT.merge(e.getKey(), e.getValue(), Long::sum);
        }
        // One entry per task that ended: as many as the listener keeps tasks, so no bound of their own.
        for (Map.Entry<String, Long> e : batch.runQueueNs.entrySet()) {
            RUN_QUEUE_NS.merge(e.getKey(), e.getValue(), Long::sum);
        }
        DROPPED.addAndGet(batch.dropped);
    }

    static synchronized void add(IoBatch batch) {
        List<Map<String, Object>> rows = IO.get(batch.source);
        if (rows == null) {
            if (IO.size() >= MAX_IO_SOURCES) {
                return;
            }
            rows = new ArrayList<>();
            IO.put(batch.source, rows);
        }
        rows.addAll(batch.documents());
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

    /** Every executor's I/O counter rows (the driver's own are the listener's). */
    static synchronized List<Map<String, Object>> ioRows() {
        List<Map<String, Object>> all = new ArrayList<>();
        for (List<Map<String, Object>> rows : IO.values()) {
            all.addAll(rows);
        }
        return all;
    }

    static synchronized Map<String, Long> rows() { return new HashMap<>(ROWS); }
    static synchronized Map<String, Long> pythonWait() { return new HashMap<>(PYTHON_WAIT); }
    static synchronized Map<String, Long> runQueueNs() { return new HashMap<>(RUN_QUEUE_NS); }
    static synchronized java.util.Set<String> executors() { return new java.util.TreeSet<>(EXECUTORS.keySet()); }
    static long dropped() { return DROPPED.get(); }
    static long intervalMs() { return intervalMs; }
    static long bucketMs() { return bucketMs; }

    /** A new application in the same JVM (tests run several) starts from an empty store. */
    static synchronized void clear() {
        ROWS.clear();
        PYTHON_WAIT.clear();
        RUN_QUEUE_NS.clear();
        EXECUTORS.clear();
        IO.clear();
        DROPPED.set(0);
    }
}
