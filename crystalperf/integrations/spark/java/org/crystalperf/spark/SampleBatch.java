package org.crystalperf.spark;

import java.io.Serializable;

/**
 * Samples aggregated on one executor since its previous shipment, sent to the driver plugin. Self-contained
 * (no state shared with earlier batches, so a lost batch loses only its own samples) and made of primitive
 * arrays: the stacks it refers to are listed once, each frame once.
 *
 * <ul>
 * <li>{@code frames[i]}: an encoded frame (fields separated by \u0002: class, method, file, line, jar);</li>
 * <li>{@code stacks[s]}: indices into {@code frames}, innermost first; {@code states[s]} the thread state
 *     (lower-cased {@link Thread.State}, "" for another) the frames were sampled in;</li>
 * <li>row r: {@code rowCount[r]} samples of stack {@code rowStack[r]} for task {@code rowTask[r]} of stage
 *     {@code rowStage[r]} in the absolute bucket {@code rowBucket[r]};</li>
 * <li>task measures t: for task {@code taskId[t]} of stage {@code taskStage[t]}, {@code taskPythonWaitMs[t]}
 *     milliseconds the samples found the task thread only waiting for its Python worker (each sample standing for
 *     the interval before it) and {@code taskRunQueueNs[t]} nanoseconds it was runnable but waited for a core
 *     (schedstat; -1: not measured).</li>
 * </ul>
 * A cluster executor's batch also says what its hook cost so far ({@link #hook}; null in local mode, where the
 * listener reads it in the same JVM).
 */
public final class SampleBatch implements Serializable {
    private static final long serialVersionUID = 4L;
    public final String executorId;
    public final long intervalMs;
    public final long bucketMs;
    public final String[] frames;
    public final int[][] stacks;
    public final String[] states;
    public final int[] rowStage;
    public final long[] rowTask;
    public final long[] rowBucket;
    public final int[] rowStack;
    public final long[] rowCount;
    public final int[] taskStage;
    public final long[] taskId;
    public final long[] taskPythonWaitMs;
    public final long[] taskRunQueueNs;
    public final long dropped;
    /** The executor's hook cost, cumulative (null: not sent with this batch). */
    public HookReport hook;

    @SuppressWarnings("checkstyle:ParameterNumber")
    public SampleBatch(String executorId, long intervalMs, long bucketMs, String[] frames, int[][] stacks,
                       String[] states, int[] rowStage, long[] rowTask, long[] rowBucket, int[] rowStack,
                       long[] rowCount, int[] taskStage, long[] taskId, long[] taskPythonWaitMs,
                       long[] taskRunQueueNs, long dropped) {
        this.executorId = executorId;
        this.intervalMs = intervalMs;
        this.bucketMs = bucketMs;
        this.frames = frames;
        this.stacks = stacks;
        this.states = states;
        this.rowStage = rowStage;
        this.rowTask = rowTask;
        this.rowBucket = rowBucket;
        this.rowStack = rowStack;
        this.rowCount = rowCount;
        this.taskStage = taskStage;
        this.taskId = taskId;
        this.taskPythonWaitMs = taskPythonWaitMs;
        this.taskRunQueueNs = taskRunQueueNs;
        this.dropped = dropped;
    }

    /** A batch of per-task measures only (sent by a task thread as the executor's last running task ends). */
    static SampleBatch measures(String executorId, long intervalMs, long bucketMs, int[] stage, long[] task,
                                long[] pythonWaitMs, long[] runQueueNs) {
        return new SampleBatch(executorId, intervalMs, bucketMs, new String[0], new int[0][], new String[0],
                new int[0], new long[0], new long[0], new int[0], new long[0], stage, task, pythonWaitMs, runQueueNs, 0);
    }
}
