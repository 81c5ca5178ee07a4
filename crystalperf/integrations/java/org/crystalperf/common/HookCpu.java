package org.crystalperf.common;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.concurrent.atomic.AtomicLongArray;

/**
 * The hook's own CPU time in this JVM, by part: what the report's {@code hook_cost} and the CPU budget
 * ({@link CpuBudget}) are made of. Measured by the hook itself, cheaply:
 * <ul>
 * <li>the hook's own threads (the stack sampler, the I/O counters) add their thread's CPU time, read once per
 * round of work ({@link #ownThreadNanos()}, one system call on the hook's thread);</li>
 * <li>work the hook does on the job's threads (the listener's callbacks on Spark's listener bus, the executor
 * plugin's task callbacks, the reporter's metric callbacks) adds its elapsed {@link System#nanoTime()}, which
 * the vDSO answers without a system call: that code never blocks, so its wall time is its CPU time.</li>
 * </ul>
 * Cumulative since the JVM loaded this class; lock-free (a task thread adding its few nanoseconds never waits).
 */
public final class HookCpu {
    /** The hook's stack sampler thread (sampling, interning, shipping its batches). */
    public static final int SAMPLER = 0;
    /** The I/O counter thread. */
    public static final int COUNTERS = 1;
    /** A listener's or reporter's callbacks on the framework's threads. */
    public static final int CALLBACKS = 2;
    /** The executor plugin's work on the task threads as each task starts and ends. */
    public static final int TASKS = 3;
    /** Receiving the executors' batches on the driver. */
    public static final int RECEIVING = 4;
    /** Writing the hook's files while the job runs (a Flink reporter's parts). */
    public static final int WRITING = 5;
    /**
     * The job's running threads stopped while the JVM took their stacks for the sampler (a global safepoint on
     * JDK 17), in core-seconds: not the hook's CPU but what the job lost to it, which no thread's CPU clock shows.
     */
    public static final int PAUSES = 6;
    /** The trace's parts, as the trace names them. */
    public static final String[] PARTS = {"sampler", "counters", "callbacks", "tasks", "receiving", "writing", "pauses"};

    private static final AtomicLongArray NANOS = new AtomicLongArray(PARTS.length);
    private static final ThreadMXBean MX = ManagementFactory.getThreadMXBean();
    /** The stack calls' own safepoints, averaged over those that took no other with them (ns; -1: none yet). */
    private static volatile long lonePauseNs = -1;
    private static volatile boolean threadCpu = true;

    private HookCpu() {}

    /** Adds {@code nanos} of CPU time to a part (negative or zero: nothing). */
    public static void add(int part, long nanos) {
        if (nanos > 0) {
            NANOS.addAndGet(part, nanos);
        }
    }

    /** Adds the nanoseconds since {@code startedNanos} (a {@link System#nanoTime()} reading) to a part. */
    public static void since(int part, long startedNanos) {
        add(part, System.nanoTime() - startedNanos);
    }

    /** The CPU nanoseconds of every part so far. */
    public static long total() {
        long sum = 0;
        for (int i = 0; i < PARTS.length; i++) {
            sum += NANOS.get(i);
        }
        return sum;
    }

    /** The CPU nanoseconds of each part so far ({@link #PARTS} order). */
    public static long[] parts() {
        long[] copy = new long[PARTS.length];
        for (int i = 0; i < PARTS.length; i++) {
            copy[i] = NANOS.get(i);
        }
        return copy;
    }

    /**
     * The calling thread's CPU time (ns); -1 where the JVM does not measure it. A hook thread reads it before and
     * after a round of its work.
     */
    public static long ownThreadNanos() {
        if (!threadCpu) {
            return -1;
        }
        try {
            return MX.getCurrentThreadCpuTime();
        } catch (RuntimeException | LinkageError e) {
            threadCpu = false;
            return -1;
        }
    }

    /**
     * The threads' stacks ({@link ThreadMXBean#getThreadInfo(long[], int)}), counting the pause it imposes on the
     * job: on JDK 17 the stacks are taken at a global safepoint, which stops every Java thread. The pause is the
     * JVM's own safepoint clock over the call ({@link SafepointClock}), less the other safepoints that fell in it (a
     * collection the stack request queued behind: then the recent pauses measured alone, averaged, stand in for the
     * call's own); without the clock, the time the calling thread spent in the call neither on a core nor waiting
     * for one ({@link ThreadSchedstat}), which also holds the VM thread's wait for a core. Counted once for each sampled thread found running, at most {@code cores}: a runnable
     * thread blocked in a native read loses nothing to the pause, so this errs high.
     */
    public static java.lang.management.ThreadInfo[] stacks(ThreadMXBean mx, long[] ids, int depth, double cores) {
        long safepointBefore = SafepointClock.nanos();
        long safepointsBefore = SafepointClock.count();
        long onCpu = safepointBefore < 0 ? ThreadSchedstat.onCpuNs() : -1;
        long queued = onCpu >= 0 ? ThreadSchedstat.runQueueNs() : -1;
        long started = queued >= 0 ? System.nanoTime() : 0;
        java.lang.management.ThreadInfo[] infos = mx.getThreadInfo(ids, depth);
        long pause = 0;
        if (safepointBefore >= 0) {
            long after = SafepointClock.nanos();
            long taken = SafepointClock.count() - safepointsBefore;
            pause = after >= safepointBefore && taken > 0 ? after - safepointBefore : 0;
            if (taken == 1) {
                long lone = lonePauseNs;
                lonePauseNs = lone < 0 ? pause : (3 * lone + pause) / 4;
            } else if (taken > 1) {
                long lone = lonePauseNs;
                pause = lone >= 0 ? Math.min(pause, lone) : pause / taken;
            }
        } else if (queued >= 0) {
            long wall = System.nanoTime() - started;
            long onCpuAfter = ThreadSchedstat.onCpuNs();
            long queuedAfter = ThreadSchedstat.runQueueNs();
            if (onCpuAfter >= onCpu && queuedAfter >= queued) {
                pause = Math.max(0, wall - (onCpuAfter - onCpu) - (queuedAfter - queued));
            }
        }
        int running = 0;
        for (java.lang.management.ThreadInfo info : infos) {
            if (info != null && info.getThreadState() == Thread.State.RUNNABLE) {
                running++;
            }
        }
        add(PAUSES, (long) (pause * Math.min(running, Math.max(1.0, cores))));
        return infos;
    }

    /** Adds what the calling thread used since {@code before} (an {@link #ownThreadNanos()} reading) to a part. */
    public static long addOwn(int part, long before) {
        long now = ownThreadNanos();
        if (before >= 0 && now >= before) {
            add(part, now - before);
        }
        return now;
    }

    /** CPU time of this whole JVM (ns), or -1 where the JVM does not expose it. */
    public static long processNanos() {
        try {
            java.lang.management.OperatingSystemMXBean os = ManagementFactory.getOperatingSystemMXBean();
            if (os instanceof com.sun.management.OperatingSystemMXBean) {
                return ((com.sun.management.OperatingSystemMXBean) os).getProcessCpuTime();
            }
        } catch (RuntimeException | LinkageError e) {
            // no process CPU time on this JVM
        }
        return -1;
    }

    /** When this JVM started (epoch ms), or -1 where the JVM does not say. */
    public static long processStartMillis() {
        try {
            return ManagementFactory.getRuntimeMXBean().getStartTime();
        } catch (RuntimeException | LinkageError e) {
            return -1;
        }
    }

    /** Parts as a JSON object of seconds, differences against {@code since} (null: since the start). */
    public static String partsJson(long[] now, long[] since) {
        StringBuilder w = new StringBuilder("{");
        for (int i = 0; i < PARTS.length; i++) {
            long v = now[i] - (since == null ? 0 : since[i]);
            w.append(i > 0 ? "," : "").append('"').append(PARTS[i]).append("\":").append(Math.max(0, v) / 1e9);
        }
        return w.append('}').toString();
    }
}
