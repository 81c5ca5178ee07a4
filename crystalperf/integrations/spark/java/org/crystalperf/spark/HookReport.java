package org.crystalperf.spark;

import java.io.Serializable;
import java.util.LinkedHashMap;
import java.util.Map;

import org.crystalperf.common.HookCpu;
import org.crystalperf.common.ThreadKinds;

/**
 * What the hook cost in one process so far (cumulative): the CPU time of each part ({@link HookCpu}), the process's
 * CPU time over the same span, the budget it ran under and how far the budget thinned its samples. An executor
 * ships it with its sample batches; the trace's {@code hook.processes} entries are made of these.
 */
public final class HookReport implements Serializable {
    private static final long serialVersionUID = 1L;
    public final String source;
    public final String host;
    /** CPU ns per part, {@link HookCpu#PARTS} order. */
    public final long[] parts;
    /** The process's CPU ns since the hook started in it; -1: unknown. */
    public final long processNanos;
    /** The process's CPU ns before the hook started in it (a JVM's start-up, for an executor); -1: unknown. */
    public final long startupNanos;
    /** When the process started, epoch ms; -1: unknown. */
    public final long processStartMs;
    /** The process's CPU ns by thread kind since the hook started ({@link ThreadKinds#KINDS} order); null: unknown. */
    public final long[] threadKinds;
    /** The process's minor page faults and kernel CPU ns since the hook started, its task threads' kernel ns (-1:
     * unknown); null: unknown. */
    public final long[] processFaults;
    public final double budgetShare;
    public final double cores;
    public final long samplesTaken;
    public final long samplesPlanned;
    public final long windows;
    public final long windowsOverBudget;

    HookReport(String source, String host, long[] parts, long processNanos, long startupNanos, long processStartMs,
               long[] threadKinds, long[] processFaults, double budgetShare, double cores, long samplesTaken, long samplesPlanned,
               long windows, long windowsOverBudget) {
        this.source = source;
        this.host = host;
        this.parts = parts;
        this.processNanos = processNanos;
        this.startupNanos = startupNanos;
        this.processStartMs = processStartMs;
        this.threadKinds = threadKinds;
        this.processFaults = processFaults;
        this.budgetShare = budgetShare;
        this.cores = cores;
        this.samplesTaken = samplesTaken;
        this.samplesPlanned = samplesPlanned;
        this.windows = windows;
        this.windowsOverBudget = windowsOverBudget;
    }

    /** The same report under another source name (an executor's id becomes {@code executor:<id>}). */
    HookReport as(String name) {
        return new HookReport(name, host, parts, processNanos, startupNanos, processStartMs, threadKinds, processFaults,
                budgetShare, cores, samplesTaken, samplesPlanned, windows, windowsOverBudget);
    }

    /** The trace's {@code HookProcess} document. */
    Map<String, Object> document() {
        Map<String, Object> m = new LinkedHashMap<>();
        long total = 0;
        Map<String, Object> named = new LinkedHashMap<>();
        for (int i = 0; i < HookCpu.PARTS.length && i < parts.length; i++) {
            total += Math.max(0, parts[i]);
            named.put(HookCpu.PARTS[i], Math.max(0, parts[i]) / 1e9);
        }
        m.put("source", source);
        if (host != null) {
            m.put("host", host);
        }
        m.put("cpu_s", total / 1e9);
        m.put("parts", named);
        if (processNanos >= 0) {
            m.put("process_cpu_s", processNanos / 1e9);
        }
        if (startupNanos >= 0) {
            m.put("startup_cpu_s", startupNanos / 1e9);
        }
        if (processStartMs > 0) {
            m.put("process_start", processStartMs / 1e3);
        }
        if (cores > 0) {
            m.put("cores", cores);
        }
        m.put("budget_share", budgetShare);
        m.put("samples_taken", samplesTaken);
        m.put("samples_planned", Math.max(samplesTaken, samplesPlanned));
        m.put("windows", windows);
        m.put("windows_over_budget", windowsOverBudget);
        return m;
    }
}
