package org.crystalperf.common;

import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.function.LongSupplier;

/**
 * A CPU budget for the hook, not a rate: it keeps a balance of the CPU time the hook may still use ({@code share}
 * of the cores the process may use, accrued per second, less the hook's own CPU time, {@link HookCpu}), and a
 * sampler's {@link Pace} waits after each round until the balance has paid back what the hook owes, never less than
 * its configured interval and never more than the analysis can do with (the floor: one sample per time bucket). It
 * adapts from the first round, so a job of a few seconds keeps to the budget too; the balance holds at most
 * {@link #WINDOW_NS} of the budget either way, so a burst (a job's first tasks, a GC) neither buys a later one nor
 * throws the interval far. The rate is also reported over windows of {@link #WINDOW_NS} (how many were over). The
 * Python twin is {@code crystalperf.core.record.budget}: the same rule, tested there with a fake clock.
 */
public final class CpuBudget {
    /** The default share of the cores the process may use: 1 %. */
    public static final double DEFAULT_SHARE = 0.01;
    static final long WINDOW_NS = 2_000_000_000L;
    private static final Path CGROUP_ROOT = Paths.get("/sys/fs/cgroup");

    private final double share;
    private final double cores;
    private final LongSupplier spentNanos;
    private final LongSupplier clock;
    private long windowStart;
    private long spentAtWindowStart;
    private long seenAt;
    private long spentSeen;
    /** CPU nanoseconds the hook may still use; negative while it owes. */
    private double balanceNs;
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
        this.windowStart = this.seenAt = clock.getAsLong();
        this.spentAtWindowStart = this.spentSeen = spentNanos.getAsLong();
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

    /**
     * The CPU nanoseconds the hook has spent beyond its budget so far (0 when within it); closes a reporting window
     * when it is long enough.
     */
    synchronized double owedNanos() {
        long now = clock.getAsLong();
        long spent = spentNanos.getAsLong();
        double limit = allowedRate() * WINDOW_NS;
        double earned = allowedRate() * (now - seenAt);
        balanceNs = Math.max(-limit, Math.min(limit, balanceNs + earned - (spent - spentSeen)));
        seenAt = now;
        spentSeen = spent;
        if (now - windowStart >= WINDOW_NS) {
            double rate = (spent - spentAtWindowStart) / (double) (now - windowStart);
            windowStart = now;
            spentAtWindowStart = spent;
            windows++;
            if (rate > allowedRate()) {
                windowsOver++;
            }
        }
        return Math.max(0, -balanceNs);
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

        /** Adapts the interval without counting a round (a round that found nothing to sample): the wait that
         * pays back what the hook owes, within the configured interval and the floor. */
        public synchronized long adapt() {
            if (!enabled()) {
                return intervalMs;
            }
            double paybackMs = owedNanos() / allowedRate() / 1e6;
            intervalMs = Math.min(floorMs, Math.max(baseMs, (long) Math.ceil(paybackMs)));
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
