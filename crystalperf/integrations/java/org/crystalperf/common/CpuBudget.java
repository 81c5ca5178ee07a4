package org.crystalperf.common;

import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.function.LongSupplier;

/**
 * A CPU budget for the hook, not a rate: the samplers of a process stretch their intervals while the hook's own
 * CPU time ({@link HookCpu}) runs above {@code share} of the cores the process may use, and come back to their
 * configured intervals when it is well under, but never sample less often than the analysis needs (a
 * {@link Pace}'s floor: one sample per time bucket). The Python twin is {@code crystalperf.core.record.budget}: the same
 * rule, tested there with a fake clock.
 *
 * <p>The rate is measured over windows of {@link #WINDOW_NS}; an interval changes once per window at most, by at
 * most a factor of {@link #MAX_STEP}, so a burst (a job's first tasks, a GC) does not throw it far.
 */
public final class CpuBudget {
    /** The default share of the cores the process may use: 1 %. */
    public static final double DEFAULT_SHARE = 0.01;
    static final long WINDOW_NS = 2_000_000_000L;
    static final double MAX_STEP = 4.0;
    /** Below this fraction of the budget a stretched interval shrinks back (halved per window). */
    static final double RELAX_BELOW = 0.5;
    private static final Path CGROUP_ROOT = Paths.get("/sys/fs/cgroup");

    private final double share;
    private final double cores;
    private final LongSupplier spentNanos;
    private final LongSupplier clock;
    private long windowStart;
    private long spentAtWindowStart;
    private double rate = -1;
    private long windows;
    private long windowsOver;

    /** The process's budget: {@code share} of its cores, over {@link HookCpu#total()} and the JVM's clock. */
    public CpuBudget(double share) {
        this(share, allowedCores(), HookCpu::total, System::nanoTime);
    }

    public CpuBudget(double share, double cores, LongSupplier spentNanos, LongSupplier clock) {
        this.share = Double.isFinite(share) ? Math.max(0, share) : 0;
        this.cores = Math.max(0.01, cores);
        this.spentNanos = spentNanos;
        this.clock = clock;
        this.windowStart = clock.getAsLong();
        this.spentAtWindowStart = spentNanos.getAsLong();
    }

    /** Whether the budget is on (a share of 0 turns it off: the samplers keep their intervals). */
    public boolean enabled() {
        return share > 0;
    }

    public double share() {
        return share;
    }

    public double cores() {
        return cores;
    }

    /** The hook's CPU seconds per second it may use. */
    public double allowedRate() {
        return share * cores;
    }

    /** Windows measured so far, and those in which the hook used more than its budget. */
    public synchronized long[] windows() {
        return new long[] {windows, windowsOver};
    }

    /** Closes the window when it is long enough; returns how many windows have closed so far. */
    private synchronized long observe() {
        long now = clock.getAsLong();
        if (now - windowStart >= WINDOW_NS) {
            long spent = spentNanos.getAsLong();
            rate = (spent - spentAtWindowStart) / (double) (now - windowStart);
            windowStart = now;
            spentAtWindowStart = spent;
            windows++;
            if (rate > allowedRate()) {
                windowsOver++;
            }
        }
        return windows;
    }

    private synchronized double lastRate() {
        return rate;
    }

    /**
     * One sampler's interval under the budget. Call {@link #next()} after each round of sampling: it counts the
     * round (as {@code interval / base} rounds of the configured rate, so the thinning is known) and returns how long
     * to wait before the next.
     */
    public final class Pace {
        private final long baseMs;
        private final long floorMs;
        private long intervalMs;
        private long seenWindows;
        private long taken;
        private double planned;

        /** {@code floorMs}: the longest interval the analysis can do with (never stretched past it). */
        public Pace(long baseMs, long floorMs) {
            this.baseMs = Math.max(1, baseMs);
            this.floorMs = Math.max(this.baseMs, floorMs);
            this.intervalMs = this.baseMs;
        }

        public synchronized long intervalMs() {
            return intervalMs;
        }

        public long baseMs() {
            return baseMs;
        }

        /** Counts a round that sampled something, then adapts the interval to the budget; the next wait (ms). */
        public synchronized long next() {
            taken++;
            planned += intervalMs / (double) baseMs;
            return adapt();
        }

        /** Adapts the interval without counting a round (a round that found nothing to sample). */
        public synchronized long adapt() {
            long closed = observe();
            if (!enabled() || closed == seenWindows) {
                return intervalMs;
            }
            seenWindows = closed;
            double used = lastRate();
            double allowed = allowedRate();
            if (used > allowed) {
                double step = Math.min(MAX_STEP, used / allowed);
                intervalMs = Math.min(floorMs, Math.max(intervalMs + 1, (long) Math.ceil(intervalMs * step)));
            } else if (used < RELAX_BELOW * allowed && intervalMs > baseMs) {
                intervalMs = Math.max(baseMs, intervalMs / 2);
            }
            return intervalMs;
        }

        /** Rounds taken so far. */
        public synchronized long taken() {
            return taken;
        }

        /** Rounds the configured interval would have taken over the same time (rounded). */
        public synchronized long planned() {
            return Math.round(planned);
        }
    }

    /**
     * The cores this process may use: the CPUs it may run on (the JVM's count), fewer where its affinity or a CPU
     * quota on its cgroup or an ancestor allows less ({@link IoCounters#cpuLimit}).
     */
    public static double allowedCores() {
        double cpus = Runtime.getRuntime().availableProcessors();
        double limit = IoCounters.cpuLimit(ProcessHandle.current().pid(), CGROUP_ROOT);
        return Double.isNaN(limit) ? cpus : Math.max(0.01, Math.min(cpus, limit));
    }
}
