package org.crystalperf.spark;

import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

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
        DROPPED.set(0);
    }
}
