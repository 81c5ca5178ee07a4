package org.crystalperf.common;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.logging.Level;
import java.util.logging.Logger;
import java.util.stream.Collectors;

/**
 * Counters of this JVM (and its descendants), read during the run: what the job moved to and from storage
 * and the network, the CPU time the processes and their whole host used, and the limits in force on it. The
 * Java twin of {@code crystalperf.core.record.iocounters.IoCounterSampler}: it reads the same files the same way
 * and makes the same rows (the trace's {@code IoSample}), so the analysis derives the bandwidth the job saw and
 * the cores it shared from them.
 *
 * <p>Every {@code intervalMs} on a daemon thread: {@code /proc/<pid>/io} read_bytes/write_bytes of the
 * process and its descendants (accumulated per pid, so an exiting child never makes the total go down),
 * {@code /proc/<pid>/net/dev} (non-loopback interfaces, namespace-wide) and the strictest cgroup v1
 * blkio.throttle / v2 io.max limit on the process's cgroup and its ancestors. Counters are cumulative since the
 * first row, which reads 0. CPU (1.8): the processes' CPU time ({@code /proc/<pid>/stat} utime + stime, accumulated
 * per pid as the bytes are), the host's busy and total CPU time ({@code /proc/stat}), its online CPUs, and the cores
 * the process may use (its affinity, and the strictest cgroup v1 {@code cpu.cfs_quota_us} / v2 {@code cpu.max}
 * quota). The process tree is re-walked every {@link #REWALK_ROWS} rows (a child that starts and ends between two
 * walks is missed): walking it reads every process's stat file of the machine, which at every row cost more than
 * all the rest. The cgroup limits are re-read at most once a second and at the last row (a process may be moved
 * into a limited cgroup after it started). At
 * most {@code maxRows} rows: when full, every other row is dropped and the interval doubles. Under a
 * {@link CpuBudget} the interval also stretches while the hook uses more than its share (never past one row a
 * second, what the bandwidth windows need); the thread's CPU time counts as the hook's ({@link HookCpu#COUNTERS}).
 * Nothing here throws, and the thread never holds up the JVM's exit.
 */
public final class IoCounters {
    private static final Logger LOG = Logger.getLogger("crystalperf");
    public static final long DEFAULT_INTERVAL_MS = 250;
    public static final int MAX_ROWS = 4096;
    /** A fork bomb below the JVM must not stall the sampler. */
    private static final int MAX_PROCESSES = 512;
    private static final Path CGROUP_ROOT = Paths.get("/sys/fs/cgroup");
    /** USER_HZ: the unit of /proc/<pid>/stat's and /proc/stat's CPU times (100 on every Linux a JVM runs on). */
    private static final double CLOCK_TICKS = 100.0;
    /** Rows between two walks of the process tree. */
    static final int REWALK_ROWS = 8;
    /**
     * The cgroup limits are re-read at most once a second: a handful of small files, unlike the tree walk, and a
     * limit set or lifted while the job runs must show within the bandwidth window it changes.
     */
    private static final long LIMITS_REREAD_NANOS = 1_000_000_000L;
    /** The longest interval a budget may stretch to: the bandwidth windows are a second long. */
    static final long FLOOR_MS = 1000;

    /** One reading; null fields were unreadable (another OS, a hidden /proc). */
    public static final class Row {
        public final double t;
        public final String source;
        public final String host;
        public final Double storageReadBytes;
        public final Double storageWriteBytes;
        public final Double networkRxBytes;
        public final Double networkTxBytes;
        public final Double diskReadLimit;
        public final Double diskWriteLimit;
        public final Double processCpuS;
        public final Double hostCpuBusyS;
        public final Double hostCpuS;
        public final Integer hostCpus;
        public final Double cpuLimit;

        Row(double t, String source, String host, Double storageReadBytes, Double storageWriteBytes,
            Double networkRxBytes, Double networkTxBytes, Double diskReadLimit, Double diskWriteLimit,
            Double processCpuS, Double hostCpuBusyS, Double hostCpuS, Integer hostCpus, Double cpuLimit) {
            this.t = t;
            this.source = source;
            this.host = host;
            this.storageReadBytes = storageReadBytes;
            this.storageWriteBytes = storageWriteBytes;
            this.networkRxBytes = networkRxBytes;
            this.networkTxBytes = networkTxBytes;
            this.diskReadLimit = diskReadLimit;
            this.diskWriteLimit = diskWriteLimit;
            this.processCpuS = processCpuS;
            this.hostCpuBusyS = hostCpuBusyS;
            this.hostCpuS = hostCpuS;
            this.hostCpus = hostCpus;
            this.cpuLimit = cpuLimit;
        }

        /** The row as the trace's {@code IoSample} document (null fields kept as null). */
        public Map<String, Object> toMap() {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("t", t);
            m.put("source", source);
            m.put("host", host);
            m.put("storage_read_bytes", storageReadBytes);
            m.put("storage_write_bytes", storageWriteBytes);
            m.put("network_rx_bytes", networkRxBytes);
            m.put("network_tx_bytes", networkTxBytes);
            m.put("disk_read_limit", diskReadLimit);
            m.put("disk_write_limit", diskWriteLimit);
            m.put("process_cpu_s", processCpuS);
            m.put("host_cpu_busy_s", hostCpuBusyS);
            m.put("host_cpu_s", hostCpuS);
            m.put("host_cpus", hostCpus);
            m.put("cpu_limit", cpuLimit);
            return m;
        }

        /** The same document as JSON text, for writers without a JSON library. */
        public String toJson() {
            StringBuilder b = new StringBuilder(200);
            b.append("{\"t\":").append(t).append(",\"source\":").append(quote(source))
                    .append(",\"host\":").append(host == null ? "null" : quote(host))
                    .append(",\"storage_read_bytes\":").append(storageReadBytes)
                    .append(",\"storage_write_bytes\":").append(storageWriteBytes)
                    .append(",\"network_rx_bytes\":").append(networkRxBytes)
                    .append(",\"network_tx_bytes\":").append(networkTxBytes)
                    .append(",\"disk_read_limit\":").append(diskReadLimit)
                    .append(",\"disk_write_limit\":").append(diskWriteLimit)
                    .append(",\"process_cpu_s\":").append(processCpuS)
                    .append(",\"host_cpu_busy_s\":").append(hostCpuBusyS)
                    .append(",\"host_cpu_s\":").append(hostCpuS)
                    .append(",\"host_cpus\":").append(hostCpus)
                    .append(",\"cpu_limit\":").append(cpuLimit).append('}');
            return b.toString();
        }
    }

    private final String source;
    private final long pid;
    private final boolean includeChildren;
    private final int maxRows;
    private final String host = hostname();
    private volatile long intervalMs;
    /** pid -> {read_bytes, write_bytes} at its last reading. */
    private Map<Long, long[]> last = new HashMap<>();
    /** pid -> its CPU time (s) at its last reading. */
    private Map<Long, Double> lastCpu = new HashMap<>();
    private long read;
    private long written;
    private double cpu;
    private boolean ioOk;
    private boolean cpuOk;
    private double[] host0;
    private boolean primed;
    private long[] net0;
    private List<Row> rows = new ArrayList<>();
    private Thread thread;
    private volatile boolean stopped;
    private CpuBudget.Pace pace;
    private long readings;
    private List<Long> tree;
    private double[] limits;
    private long limitsReadNanos;
    private double cores = Double.NaN;

    public IoCounters(String source) {
        this(source, DEFAULT_INTERVAL_MS, MAX_ROWS, true);
    }

    public IoCounters(String source, long intervalMs, int maxRows, boolean includeChildren) {
        this.source = source;
        this.pid = ProcessHandle.current().pid();
        this.intervalMs = Math.max(1, intervalMs);
        this.maxRows = Math.max(8, maxRows);
        this.includeChildren = includeChildren;
    }

    public String source() {
        return source;
    }

    /** Reads under this budget (call before {@link #start()}); the same object. */
    public synchronized IoCounters budget(CpuBudget budget) {
        if (budget != null && thread == null) {
            pace = budget.new Pace(intervalMs, FLOOR_MS);
        }
        return this;
    }

    /** Takes the first row (all counters 0) and starts the daemon thread; a second call does nothing. */
    public synchronized IoCounters start() {
        if (thread == null) {
            sampleOnce();
            try {
                thread = new Thread(this::loop, "crystalperf-io-counters");
                thread.setDaemon(true);
                thread.start();
            } catch (Throwable t) {
                LOG.log(Level.FINE, "crystalperf: the I/O counter thread did not start", t);
            }
        }
        return this;
    }

    private void loop() {
        long wait = intervalMs;
        while (!stopped) {
            try {
                Thread.sleep(wait);
            } catch (InterruptedException e) {
                return;
            }
            if (!stopped) {
                long cpu = HookCpu.ownThreadNanos();
                sampleOnce();
                HookCpu.addOwn(HookCpu.COUNTERS, cpu);
                CpuBudget.Pace p = pace;
                wait = p == null ? intervalMs : Math.max(intervalMs, p.next());
            }
        }
    }

    /** Stops the thread (waiting at most one interval), takes a last reading and returns every row. */
    public List<Row> stop() {
        stopped = true;
        Thread t;
        synchronized (this) {
            t = thread;
        }
        if (t != null && t != Thread.currentThread()) {
            t.interrupt();
            try {
                t.join(Math.min(2000, intervalMs + 1000));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        synchronized (this) {
            tree = null;  // the last row counts every process alive now
            limits = null;  // and the limits in force now
        }
        sampleOnce();
        return rows();
    }

    /** Stops the thread without waiting for it or taking another row (a process shutting down). */
    public void cancel() {
        stopped = true;
        Thread t;
        synchronized (this) {
            t = thread;
        }
        if (t != null) {
            t.interrupt();
        }
    }

    public synchronized List<Row> rows() {
        return new ArrayList<>(rows);
    }

    /** The rows taken after {@code t} (epoch seconds), oldest first. */
    public synchronized List<Row> rowsAfter(double t) {
        List<Row> found = new ArrayList<>();
        for (Row r : rows) {
            if (r.t > t) {
                found.add(r);
            }
        }
        return found;
    }

    /**
     * Forgets the rows older than {@code t} but the last of them (the reading just before a job started),
     * and goes back to the base interval when that left the buffer mostly empty: a long-lived process
     * (a TaskManager of a session cluster) keeps only what the jobs it still knows need.
     */
    public synchronized void forgetBefore(double t, long baseIntervalMs) {
        int first = 0;
        while (first + 1 < rows.size() && rows.get(first + 1).t < t) {
            first++;
        }
        if (first > 0) {
            rows = new ArrayList<>(rows.subList(first, rows.size()));
            if (rows.size() < maxRows / 4) {
                intervalMs = Math.max(1, baseIntervalMs);
            }
        }
    }

    /** Reads the counters once and keeps the row; null (and no row) when they could not be read. */
    public Row sampleOnce() {
        try {
            Row row;
            synchronized (this) {
                updateTree();
                long[] net = networkBytes(pid);
                if (net != null && net0 == null) {
                    net0 = net;
                }
                long nowNanos = System.nanoTime();
                if (limits == null || nowNanos - limitsReadNanos >= LIMITS_REREAD_NANOS) {
                    limits = diskLimits(pid, CGROUP_ROOT);
                    cores = cpuLimit(pid, CGROUP_ROOT);
                    limitsReadNanos = nowNanos;
                }
                double[] hostNow = hostCpu();
                if (hostNow != null && host0 == null) {
                    host0 = hostNow;
                }
                row = new Row(System.currentTimeMillis() / 1000.0, source, host,
                        ioOk ? (double) read : null, ioOk ? (double) written : null,
                        net != null && net0 != null ? (double) Math.max(0, net[0] - net0[0]) : null,
                        net != null && net0 != null ? (double) Math.max(0, net[1] - net0[1]) : null,
                        Double.isNaN(limits[0]) ? null : limits[0], Double.isNaN(limits[1]) ? null : limits[1],
                        cpuOk ? cpu : null,
                        hostNow != null && host0 != null ? Math.max(0, hostNow[0] - host0[0]) : null,
                        hostNow != null && host0 != null ? Math.max(0, hostNow[1] - host0[1]) : null,
                        hostNow != null ? (int) hostNow[2] : null,
                        Double.isNaN(cores) ? null : cores);
                rows.add(row);
                if (rows.size() >= maxRows) {
                    List<Row> halved = new ArrayList<>(rows.size() / 2 + 1);
                    for (int i = 0; i < rows.size() - 1; i += 2) {
                        halved.add(rows.get(i));
                    }
                    halved.add(rows.get(rows.size() - 1));
                    rows = halved;
                    intervalMs *= 2;
                }
            }
            return row;
        } catch (Throwable t) {  // never the job's problem
            LOG.log(Level.FINE, "crystalperf: I/O counters unreadable", t);
            return null;
        }
    }

    private void updateTree() {
        if (tree == null || readings % REWALK_ROWS == 0) {
            tree = includeChildren ? descendants(pid) : List.of(pid);
        }
        readings++;
        List<Long> pids = tree;
        for (long p : pids) {
            updateCpu(p);
            long[] now = procIo(p);
            if (now == null) {
                continue;
            }
            ioOk = true;
            long[] before = last.get(p);
            if (before == null) {
                // what ran when the sampler started counts from then (the first row reads 0), a child forked
                // later from its birth
                before = p == pid || !primed ? now : new long[] {0, 0};
            }
            read += Math.max(0, now[0] - before[0]);
            written += Math.max(0, now[1] - before[1]);
            last.put(p, now);
        }
        primed = true;
        if (last.size() + lastCpu.size() > 8 * pids.size() + 128) {  // forget exited pids (what they used stays)
            Set<Long> alive = new HashSet<>(pids);
            last.keySet().retainAll(alive);
            lastCpu.keySet().retainAll(alive);
        }
    }

    private void updateCpu(long p) {
        double now = procCpu(p);
        if (Double.isNaN(now)) {
            return;
        }
        cpuOk = true;
        Double before = lastCpu.get(p);
        if (before == null) {
            before = p == pid || !primed ? now : 0.0;
        }
        cpu += Math.max(0, now - before);
        lastCpu.put(p, now);
    }

    /** CPU seconds (utime + stime) one process used so far; NaN when unreadable. */
    static double procCpu(long pid) {
        String text = read(Paths.get("/proc/" + pid + "/stat"));
        if (text == null) {
            return Double.NaN;
        }
        // the command name may hold spaces and parentheses: the fields start after the last ')'
        int close = text.lastIndexOf(')');
        if (close < 0 || close + 2 > text.length()) {
            return Double.NaN;
        }
        String[] fields = text.substring(close + 2).trim().split("\\s+");
        try {
            return (Long.parseLong(fields[11]) + Long.parseLong(fields[12])) / CLOCK_TICKS;
        } catch (RuntimeException e) {
            return Double.NaN;
        }
    }

    /** {busy, total} CPU seconds of the host since boot over all its CPUs, and its online CPUs; null if unreadable. */
    static double[] hostCpu() {
        String text = read(Paths.get("/proc/stat"));
        if (text == null || !text.startsWith("cpu ")) {
            return null;
        }
        String[] lines = text.split("\n");
        String[] fields = lines[0].trim().split("\\s+");
        try {
            long total = 0;
            for (int i = 1; i < Math.min(fields.length, 9); i++) {  // guest time is already in user time
                total += Long.parseLong(fields[i]);
            }
            long idle = Long.parseLong(fields[4]) + (fields.length > 5 ? Long.parseLong(fields[5]) : 0);
            int cpus = 0;
            for (int i = 1; i < lines.length; i++) {
                if (lines[i].startsWith("cpu") && lines[i].length() > 3 && Character.isDigit(lines[i].charAt(3))) {
                    cpus++;
                }
            }
            return new double[] {(total - idle) / CLOCK_TICKS, total / CLOCK_TICKS, Math.max(1, cpus)};
        } catch (RuntimeException e) {
            return null;
        }
    }

    /** CPUs in a list such as "0-3,8,10-11" (a cpuset or Cpus_allowed_list); 0 when unreadable. */
    static int countCpus(String list) {
        int count = 0;
        for (String part : list.trim().split(",")) {
            if (part.isEmpty()) {
                continue;
            }
            int dash = part.indexOf('-');
            try {
                count += dash < 0 ? 1 : Integer.parseInt(part.substring(dash + 1)) - Integer.parseInt(part.substring(0, dash)) + 1;
            } catch (NumberFormatException e) {
                return 0;
            }
        }
        return count;
    }

    private static double quota(Path directory, boolean v2) {
        if (v2) {
            String text = read(directory.resolve("cpu.max"));
            if (text == null) {
                return Double.NaN;
            }
            String[] fields = text.trim().split("\\s+");
            if (fields.length == 2 && isDigits(fields[0]) && isDigits(fields[1]) && Long.parseLong(fields[1]) > 0) {
                return Double.parseDouble(fields[0]) / Double.parseDouble(fields[1]);
            }
            return Double.NaN;
        }
        String q = read(directory.resolve("cpu.cfs_quota_us"));
        String p = read(directory.resolve("cpu.cfs_period_us"));
        if (q == null || p == null) {
            return Double.NaN;
        }
        try {
            long quota = Long.parseLong(q.trim());
            long period = Long.parseLong(p.trim());
            return quota > 0 && period > 0 ? (double) quota / period : Double.NaN;
        } catch (NumberFormatException e) {
            return Double.NaN;
        }
    }

    /**
     * The cores the process may use: its CPU affinity ({@code Cpus_allowed_list}) and the strictest CPU quota
     * of its cgroup and its ancestors (v1 cpu.cfs_quota_us / cpu.cfs_period_us, v2 cpu.max); NaN when neither.
     */
    static double cpuLimit(long pid, Path root) {
        double strictest = Double.NaN;
        String status = read(Paths.get("/proc/" + pid + "/status"));
        if (status != null) {
            for (String line : status.split("\n")) {
                if (line.startsWith("Cpus_allowed_list:")) {
                    int n = countCpus(line.substring("Cpus_allowed_list:".length()));
                    if (n > 0) {
                        strictest = n;
                    }
                }
            }
        }
        Map<String, String> paths = cgroupPaths(pid);
        String[][] hierarchies = {{"cpu", "cpu"}, {"cpu", "cpu,cpuacct"}, {"", ""}};
        for (String[] h : hierarchies) {
            String controller = h[0];
            Path base = controller.isEmpty() ? root : root.resolve(h[1]);
            String path = paths.get(controller);
            if (path == null || !Files.isDirectory(base)) {
                continue;
            }
            String relative = path.replaceFirst("^/+", "");
            Path directory = relative.isEmpty() ? base : base.resolve(relative).normalize();
            while (true) {
                double q = quota(directory, controller.isEmpty());
                if (!Double.isNaN(q)) {
                    strictest = Double.isNaN(strictest) ? q : Math.min(strictest, q);
                }
                if (directory.equals(base) || !directory.startsWith(base) || directory.getParent() == null) {
                    break;
                }
                directory = directory.getParent();
            }
        }
        return strictest;
    }

    /** The process and its descendants (bounded). */
    static List<Long> descendants(long pid) {
        List<Long> found = new ArrayList<>();
        found.add(pid);
        try {
            ProcessHandle.of(pid).ifPresent(h -> h.descendants().limit(MAX_PROCESSES - 1)
                    .forEach(d -> found.add(d.pid())));
        } catch (Throwable t) {
            // no process table to walk (a security manager, another OS): the process alone
        }
        return found;
    }

    private static String read(Path path) {
        try {
            return new String(Files.readAllBytes(path), StandardCharsets.US_ASCII);
        } catch (Exception e) {
            return null;
        }
    }

    /** read_bytes and write_bytes of one process (bytes that reached the storage device). */
    static long[] procIo(long pid) {
        String text = read(Paths.get("/proc/" + pid + "/io"));
        if (text == null) {
            return null;
        }
        long r = -1;
        long w = -1;
        try {
            for (String line : text.split("\n")) {
                int colon = line.indexOf(':');
                if (colon < 0) {
                    continue;
                }
                String key = line.substring(0, colon);
                if (key.equals("read_bytes")) {
                    r = Long.parseLong(line.substring(colon + 1).trim());
                } else if (key.equals("write_bytes")) {
                    w = Long.parseLong(line.substring(colon + 1).trim());
                }
            }
        } catch (NumberFormatException e) {
            return null;
        }
        return r >= 0 && w >= 0 ? new long[] {r, w} : null;
    }

    /** Received and sent bytes on the non-loopback interfaces of the process's network namespace. */
    static long[] networkBytes(long pid) {
        String text = read(Paths.get("/proc/" + pid + "/net/dev"));
        if (text == null) {
            return null;
        }
        String[] lines = text.split("\n");
        long rx = 0;
        long tx = 0;
        try {
            for (int i = 2; i < lines.length; i++) {
                int colon = lines[i].indexOf(':');
                if (colon < 0) {
                    continue;
                }
                String name = lines[i].substring(0, colon).trim();
                String[] fields = lines[i].substring(colon + 1).trim().split("\\s+");
                if (name.equals("lo") || fields.length < 9) {
                    continue;
                }
                rx += Long.parseLong(fields[0]);
                tx += Long.parseLong(fields[8]);
            }
        } catch (NumberFormatException e) {
            return null;
        }
        return new long[] {rx, tx};
    }

    /** controller -> path of the process's cgroup ("" for the unified v2 hierarchy). */
    static Map<String, String> cgroupPaths(long pid) {
        Map<String, String> paths = new HashMap<>();
        String text = read(Paths.get("/proc/" + pid + "/cgroup"));
        if (text == null) {
            return paths;
        }
        for (String line : text.split("\n")) {
            String[] parts = line.split(":", 3);
            if (parts.length < 3) {
                continue;
            }
            if (parts[1].isEmpty()) {
                paths.put("", parts[2]);
            } else {
                for (String controller : parts[1].split(",")) {
                    paths.put(controller, parts[2]);
                }
            }
        }
        return paths;
    }

    private static double v1Limit(Path directory, String name) {
        String text = read(directory.resolve(name));
        double strictest = Double.NaN;
        if (text == null) {
            return strictest;
        }
        for (String line : text.split("\n")) {
            String[] fields = line.trim().split("\\s+");
            if (fields.length == 2 && isDigits(fields[1])) {
                double value = Double.parseDouble(fields[1]);
                if (value > 0) {
                    strictest = Double.isNaN(strictest) ? value : Math.min(strictest, value);
                }
            }
        }
        return strictest;
    }

    private static double v2Limit(Path directory, String key) {
        String text = read(directory.resolve("io.max"));
        double strictest = Double.NaN;
        if (text == null) {
            return strictest;
        }
        for (String line : text.split("\n")) {
            String[] fields = line.trim().split("\\s+");
            for (int i = 1; i < fields.length; i++) {
                int eq = fields[i].indexOf('=');
                if (eq < 0 || !fields[i].substring(0, eq).equals(key)) {
                    continue;
                }
                String value = fields[i].substring(eq + 1);
                if (isDigits(value)) {
                    double v = Double.parseDouble(value);
                    if (v > 0) {
                        strictest = Double.isNaN(strictest) ? v : Math.min(strictest, v);
                    }
                }
            }
        }
        return strictest;
    }

    private static boolean isDigits(String s) {
        if (s.isEmpty()) {
            return false;
        }
        for (int i = 0; i < s.length(); i++) {
            if (!Character.isDigit(s.charAt(i))) {
                return false;
            }
        }
        return true;
    }

    /**
     * The strictest read and write byte-rate limits of the process's cgroup and its ancestors (v1 blkio
     * throttle or v2 io.max), any device; NaN where none is set.
     */
    static double[] diskLimits(long pid, Path root) {
        Map<String, String> paths = cgroupPaths(pid);
        double[] strictest = {Double.NaN, Double.NaN};
        String[][] hierarchies = {{"blkio", "blkio"}, {"", ""}};
        for (String[] h : hierarchies) {
            String controller = h[0];
            Path base = controller.isEmpty() ? root : root.resolve(h[1]);
            String path = paths.get(controller);
            if (path == null || !Files.isDirectory(base)) {
                continue;
            }
            String relative = path.replaceFirst("^/+", "");
            Path directory = relative.isEmpty() ? base : base.resolve(relative).normalize();
            while (true) {
                double r = controller.isEmpty() ? v2Limit(directory, "rbps")
                        : v1Limit(directory, "blkio.throttle.read_bps_device");
                double w = controller.isEmpty() ? v2Limit(directory, "wbps")
                        : v1Limit(directory, "blkio.throttle.write_bps_device");
                if (!Double.isNaN(r)) {
                    strictest[0] = Double.isNaN(strictest[0]) ? r : Math.min(strictest[0], r);
                }
                if (!Double.isNaN(w)) {
                    strictest[1] = Double.isNaN(strictest[1]) ? w : Math.min(strictest[1], w);
                }
                if (directory.equals(base) || !directory.startsWith(base) || directory.getParent() == null) {
                    break;
                }
                directory = directory.getParent();
            }
        }
        return strictest;
    }

    /** This host's name as gethostname(2) gives it (no DNS lookup: that may hang). */
    public static String hostname() {
        String name = read(Paths.get("/proc/sys/kernel/hostname"));
        if (name != null && !name.trim().isEmpty()) {
            return name.trim();
        }
        String env = System.getenv("HOSTNAME");
        return env != null && !env.isEmpty() ? env : null;
    }

    /** The rows as a JSON array. */
    public static String toJson(List<Row> rows) {
        return rows.stream().map(Row::toJson).collect(Collectors.joining(",", "[", "]"));
    }

    /** A JSON string literal (both hooks write their JSON by hand: no JSON library on their class paths). */
    public static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : (s == null ? "" : s).toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }
}
