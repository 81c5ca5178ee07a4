package org.crystalperf.common;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * CPU time this JVM's threads used, by the kind of thread, read from {@code /proc/self/task} (Linux): the
 * framework's network threads (the data exchange, {@link #NETWORK}: Flink's netty threads, Spark's shuffle and RPC
 * event loops, by the name prefixes the hook gives), the garbage collector's pause workers ({@link #GC}), its
 * concurrent threads ({@link #GC_CONCURRENT}), the JIT compilers' ({@link #JIT}) and crystalperf's own
 * ({@link #HOOK}: the sampler, the I/O counters). Task threads are counted by the hook from the framework (their
 * names are longer than the 15 characters the kernel keeps), and whatever is left of the process's CPU time is the
 * "other" kind (timers, heartbeats, RPC dispatch).
 *
 * <p>The totals are cumulative from this object's first look and never go down: a thread that ended keeps the
 * time it was last seen to have used (a refresh every second or so loses at most that much of a short-lived
 * compiler thread). Memory is bounded in bytes: past {@code maxBytes} new threads are not followed (their time
 * falls to "other") and counted in {@link #untracked()}. Nothing here throws: without {@code /proc} (another OS)
 * {@link #totals()} is null and the part simply has no split.
 */
public final class ThreadKinds {
    private static final Logger LOG = Logger.getLogger(ThreadKinds.class.getName());
    public static final String NETWORK = "network";
    public static final String GC = "gc";
    public static final String JIT = "jit";
    public static final String GC_CONCURRENT = "gc_concurrent";
    public static final String HOOK = "hook";
    /** The kinds this class measures, in the order of {@link #totals()}. */
    public static final String[] KINDS = {NETWORK, GC, JIT, GC_CONCURRENT, HOOK};
    /** Flink's data exchange: "Flink Netty Server|Client (port) Thread n". */
    public static final String[] FLINK_NETWORK = {"Flink Netty"};
    /**
     * Spark's netty event loops, named after their transport module: "shuffle-client-n-m", "shuffle-server-n-m",
     * "rpc-client-n-m", "rpc-server-n-m", "files-client-n-m".
     */
    public static final String[] SPARK_NETWORK = {"shuffle-client", "shuffle-server", "rpc-client", "rpc-server",
        "files-client", "files-server"};
    /** Estimated heap of one followed thread (map entry, boxed key, the long[] value). */
    static final int ENTRY_BYTES = 112;
    private static final int UNTRACKED = -1;
    /** Kernel clock ticks per second (the stat fallback's unit; 100 on every Linux we know). */
    private static final long TICK_NS = 10_000_000L;

    private final Path taskDir;
    private final long maxBytes;
    private final String[] networkPrefixes;
    /** tid -> {kind index or UNTRACKED, start time (clock ticks since boot), last CPU time (ns)}. */
    private final Map<Integer, long[]> threads = new HashMap<>();
    /** CPU time of ended threads, per kind. */
    private final long[] retired = new long[KINDS.length];
    private long untracked;
    private boolean unavailable;

    /** This JVM's threads; {@code networkPrefixes}: the names of the framework's network threads begin so. */
    public ThreadKinds(String[] networkPrefixes, long maxBytes) {
        this(Paths.get("/proc/self/task"), networkPrefixes, maxBytes);
    }

    ThreadKinds(Path taskDir, String[] networkPrefixes, long maxBytes) {
        this.taskDir = taskDir;
        this.networkPrefixes = networkPrefixes.clone();
        this.maxBytes = Math.max(0, maxBytes);
    }

    /**
     * The kind of a thread by its kernel name (at most 15 characters of the Java name), or -1 for a thread this
     * class does not measure. HotSpot names its compilers "C1/C2 CompilerThreadN"; the network threads are the
     * framework's, by the prefixes given. The collector's threads are split in two, because a JVM
     * given fewer CPUs may pick another collector that keeps one kind of work and not the other:
     * <ul>
     * <li>{@link #GC}: the work done while the application is stopped: the parallel pause workers ("GC Thread#n",
     * "ParGC Thread#n") and the "VM Thread", in which the serial collector (the JVM's pick on one CPU) runs and
     * the other collectors' pauses start and end; and the collectors whose threads do all kinds of work at once
     * (ZGC's "Z...", "Shenandoah ...").
     * <li>{@link #GC_CONCURRENT}: G1's and CMS's threads that run beside the application: remembered-set
     * refinement ("G1 Refine#n"), concurrent marking ("G1 Conc#n", "G1 Main Marker", "CMS Main Thread",
     * "Conc#n") and G1's service threads. The serial collector has none of them.
     * </ul>
     */
    int kindOf(String comm) {
        for (String prefix : networkPrefixes) {
            if (comm.startsWith(prefix)) {
                return 0;
            }
        }
        if (comm.startsWith("crystalperf")) {
            return 4;  // the hook's own threads: its sampler, its I/O counters
        }
        if (comm.startsWith("G1 ") || comm.startsWith("CMS ") || comm.startsWith("Conc#")) {
            return 3;
        }
        if (comm.startsWith("GC Thread") || comm.startsWith("ParGC Thread")
                || comm.startsWith("ZWorker") || comm.startsWith("ZDirector") || comm.startsWith("ZDriver")
                || comm.startsWith("ZUnmapper") || comm.startsWith("ZUncommitter") || comm.startsWith("Shenandoah")
                || comm.equals("VM Thread")) {
            return 1;
        }
        if (comm.contains("CompilerThre") || comm.startsWith("JVMCI") || comm.startsWith("Sweeper thread")) {
            return 2;
        }
        return UNTRACKED;
    }

    /** Each kind's CPU ns from {@code start} to {@code now} (both {@link #KINDS} order, from {@link #totals()}). */
    public static long[] since(long[] now, long[] start) {
        long[] used = new long[now.length];
        for (int i = 0; i < now.length; i++) {
            used[i] = Math.max(0, now[i] - (i < start.length ? start[i] : 0));
        }
        return used;
    }

    /**
     * A process's CPU seconds by thread kind, in the trace's order: "task" its task threads' ({@code taskNanos}),
     * the kinds this class measures ({@code kindsNanos}, {@link #KINDS} order), and "other" what is left of the
     * process's {@code processNanos} over the same span.
     */
    public static Map<String, Double> split(long taskNanos, long[] kindsNanos, long processNanos) {
        Map<String, Double> seconds = new LinkedHashMap<>();
        seconds.put("task", taskNanos / 1e9);
        long known = taskNanos;
        for (int i = 0; i < KINDS.length; i++) {
            long used = Math.max(0, kindsNanos[i]);
            known += used;
            seconds.put(KINDS[i], used / 1e9);
        }
        seconds.put("other", Math.max(0, processNanos - known) / 1e9);
        return seconds;
    }

    /** The cumulative CPU nanoseconds per kind ({@link #KINDS} order), refreshed now; null without /proc. */
    public synchronized long[] totals() {
        if (!refresh()) {
            return null;
        }
        long[] sums = retired.clone();
        for (long[] t : threads.values()) {
            if (t[0] != UNTRACKED) {
                sums[(int) t[0]] += t[2];
            }
        }
        return sums;
    }

    /**
     * This process's page faults served from memory and its CPU time in the kernel, {minor faults, kernel ns}, from
     * {@code /proc/self/stat}; null without it. A JVM takes a minor fault for every 4 KiB page of heap it touches
     * first, and threads faulting at once contend in the kernel: a fresh JVM whose heap more subtasks fill at once
     * spends more CPU per record there, which the what-ifs' constant work per record does not see.
     */
    public static long[] processFaults() {
        String stat = read(Paths.get("/proc/self/stat"));
        int close = stat == null ? -1 : stat.lastIndexOf(')');
        if (close < 0) {
            return null;
        }
        String[] fields = stat.substring(close + 2).trim().split(" ");
        try {
            // fields[0] is the state (stat field 3): minflt is field 10, stime field 15
            return new long[] {Long.parseLong(fields[7]), Long.parseLong(fields[12]) * TICK_NS};
        } catch (NumberFormatException | ArrayIndexOutOfBoundsException e) {
            return null;
        }
    }

    /** Threads not followed because of the memory bound. */
    public synchronized long untracked() {
        return untracked;
    }

    /** Estimated bytes held. */
    public synchronized long bytes() {
        return (long) threads.size() * ENTRY_BYTES;
    }

    /** Reads the threads once; false when /proc is not there (then it is never tried again). */
    public synchronized boolean refresh() {
        if (unavailable) {
            return false;
        }
        try {
            Set<Integer> alive = new HashSet<>();
            try (DirectoryStream<Path> entries = Files.newDirectoryStream(taskDir)) {
                for (Path entry : entries) {
                    int tid;
                    try {
                        tid = Integer.parseInt(entry.getFileName().toString());
                    } catch (NumberFormatException e) {
                        continue;
                    }
                    if (see(tid, entry)) {
                        alive.add(tid);
                    }
                }
            }
            for (Iterator<Map.Entry<Integer, long[]>> it = threads.entrySet().iterator(); it.hasNext(); ) {
                Map.Entry<Integer, long[]> e = it.next();
                if (!alive.contains(e.getKey())) {
                    retire(e.getValue());
                    it.remove();
                }
            }
            return true;
        } catch (IOException | RuntimeException e) {
            if (threads.isEmpty()) {
                unavailable = true;
                LOG.log(Level.FINE, "crystalperf: no per-thread CPU times in " + taskDir + " (no split by thread kind)", e);
                return false;
            }
            LOG.log(Level.FINE, "crystalperf: could not read " + taskDir, e);
            return true;  // the last values stand
        }
    }

    private void retire(long[] t) {
        if (t[0] != UNTRACKED) {
            retired[(int) t[0]] += t[2];
        }
    }

    /** Looks at one thread; false when it is gone (or unreadable) by now. */
    private boolean see(int tid, Path dir) {
        long[] known = threads.get(tid);
        if (known != null && known[0] == UNTRACKED) {
            return true;  // a thread of no measured kind: nothing to read
        }
        if (known == null) {
            String stat = read(dir.resolve("stat"));
            if (stat == null) {
                return false;
            }
            int open = stat.indexOf('(');
            int close = stat.lastIndexOf(')');
            if (open < 0 || close < open) {
                return false;
            }
            if ((long) (threads.size() + 1) * ENTRY_BYTES > maxBytes) {
                untracked++;
                return false;
            }
            String[] fields = stat.substring(close + 2).trim().split(" ");
            // fields[0] is the state (stat field 3): utime, stime and starttime are fields 14, 15 and 22
            long start = fields.length > 19 ? Long.parseLong(fields[19]) : 0;
            known = new long[] {kindOf(stat.substring(open + 1, close)), start, 0};
            threads.put(tid, known);
            if (known[0] == UNTRACKED) {
                return true;
            }
        }
        long cpu = cpuNanos(dir);
        if (cpu < 0) {
            return false;
        }
        if (cpu < known[2]) {
            // the thread id was reused by a new thread: the old one ended
            retire(known);
        }
        known[2] = cpu;
        return true;
    }

    /** A thread's CPU time: schedstat's first field (ns), else stat's utime + stime (clock ticks). */
    private static long cpuNanos(Path dir) {
        String schedstat = read(dir.resolve("schedstat"));
        if (schedstat != null) {
            String first = schedstat.trim().split(" ", 2)[0];
            try {
                return Long.parseLong(first);
            } catch (NumberFormatException e) {
                // fall back to stat
            }
        }
        String stat = read(dir.resolve("stat"));
        int close = stat == null ? -1 : stat.lastIndexOf(')');
        if (close < 0) {
            return -1;
        }
        String[] fields = stat.substring(close + 2).trim().split(" ");
        if (fields.length < 13) {
            return -1;
        }
        return (Long.parseLong(fields[11]) + Long.parseLong(fields[12])) * TICK_NS;
    }

    private static String read(Path file) {
        try {
            return new String(Files.readAllBytes(file), StandardCharsets.UTF_8);
        } catch (IOException | RuntimeException e) {
            return null;  // the thread ended
        }
    }
}
