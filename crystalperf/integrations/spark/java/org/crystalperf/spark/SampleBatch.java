package org.crystalperf.spark;

import java.io.Serializable;
import java.util.HashMap;

/**
 * Samples aggregated on one executor since its previous shipment, sent to the driver plugin.
 * Row key: stageId TAB taskId TAB absolute bucket TAB thread state (lower-cased {@link Thread.State})
 * TAB encoded stack (frames separated by \u0001, fields of a frame by \u0002: class, method, file, line, jar).
 */
public final class SampleBatch implements Serializable {
    private static final long serialVersionUID = 2L;
    public final String executorId;
    public final long intervalMs;
    public final long bucketMs;
    public final HashMap<String, Long> rows;
    /** stageId TAB taskId -> samples where the task thread only waited for its Python worker. */
    public final HashMap<String, Long> pythonWait;
    /** stageId TAB taskId -> nanoseconds the task thread was runnable but waited for a core (schedstat). */
    public final HashMap<String, Long> runQueueNs;
    public final long dropped;

    public SampleBatch(String executorId, long intervalMs, long bucketMs, HashMap<String, Long> rows,
                       HashMap<String, Long> pythonWait, HashMap<String, Long> runQueueNs, long dropped) {
        this.executorId = executorId;
        this.intervalMs = intervalMs;
        this.bucketMs = bucketMs;
        this.rows = rows;
        this.pythonWait = pythonWait;
        this.runQueueNs = runQueueNs;
        this.dropped = dropped;
    }
}
