package org.crystalperf.common;

import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.lang.management.MemoryPoolMXBean;
import java.lang.management.MemoryType;
import java.lang.management.MemoryUsage;
import java.util.ArrayList;
import java.util.List;

/**
 * How full this JVM's heap was of live data, and what its collector did to keep room: the heap the tasks of a
 * process share. A collector that keeps finding most of the old generation live collects it again and again, each
 * time for little room, so its CPU time grows with the live share far faster than with the records: halving a
 * process's records can remove most of it. The JVM's own beans say it: the old generation pool's usage after its
 * latest collection (its live data then), and the collector beans' counts and times, split into the old
 * generation's collections and the young's by the collectors' names. A collector without generations (ZGC,
 * Shenandoah) or an unknown one leaves the old generation unknown (-1).
 *
 * <p>{@link Tracker} follows one job: the collections since it began and the live data after each old collection
 * seen (a collection between two reads is seen at the second, with the live data of the latest).
 */
public final class HeapPressure {
    /** Collector beans that collect the old generation (a full or mixed collection), by name. */
    private static final String[] OLD_COLLECTORS = {"MarkSweepCompact", "PS MarkSweep", "G1 Old Generation",
        "ConcurrentMarkSweep"};
    /** Collector beans that collect the young generation only. */
    private static final String[] YOUNG_COLLECTORS = {"Copy", "PS Scavenge", "G1 Young Generation", "ParNew"};
    /** Heap pools that are the old generation. */
    private static final String[] OLD_POOLS = {"Tenured Gen", "PS Old Gen", "G1 Old Gen", "CMS Old Gen"};

    private HeapPressure() {
    }

    /** The heap's maximum size in bytes; -1 where the JVM does not say. */
    public static long heapMaxBytes() {
        try {
            return ManagementFactory.getMemoryMXBean().getHeapMemoryUsage().getMax();
        } catch (RuntimeException | LinkageError e) {
            return -1;
        }
    }

    /** {old collections, their ms, young collections, their ms} so far (-1 each where unknown). */
    public static long[] collections() {
        long[] totals = {-1, -1, -1, -1};
        try {
            for (GarbageCollectorMXBean bean : ManagementFactory.getGarbageCollectorMXBeans()) {
                int at = named(bean.getName(), OLD_COLLECTORS) ? 0 : named(bean.getName(), YOUNG_COLLECTORS) ? 2 : -1;
                long count = bean.getCollectionCount();
                long millis = bean.getCollectionTime();
                if (at < 0 || count < 0 || millis < 0) {
                    continue;
                }
                totals[at] = Math.max(0, totals[at]) + count;
                totals[at + 1] = Math.max(0, totals[at + 1]) + millis;
            }
        } catch (RuntimeException | LinkageError e) {
            // unknown stays -1
        }
        return totals;
    }

    /** Bytes of the old generation in use after its latest collection (its live data then); -1 where unknown. */
    public static long oldLiveBytes() {
        long live = -1;
        try {
            for (MemoryPoolMXBean pool : oldPools()) {
                MemoryUsage after = pool.getCollectionUsage();
                if (after != null) {
                    live = Math.max(0, live) + after.getUsed();
                }
            }
        } catch (RuntimeException | LinkageError e) {
            return -1;
        }
        return live;
    }

    private static List<MemoryPoolMXBean> oldPools() {
        List<MemoryPoolMXBean> found = new ArrayList<>();
        for (MemoryPoolMXBean pool : ManagementFactory.getMemoryPoolMXBeans()) {
            if (pool.getType() == MemoryType.HEAP && named(pool.getName(), OLD_POOLS)) {
                found.add(pool);
            }
        }
        return found;
    }

    private static boolean named(String name, String[] names) {
        for (String known : names) {
            if (known.equals(name)) {
                return true;
            }
        }
        return false;
    }

    /** One job's view: the collections since it began, and the live data after the old collections it saw. */
    public static final class Tracker {
        private final long[] atStart = collections();
        private long oldSeen = atStart[0];
        private double liveSum;
        private long liveSeen;
        private long liveMax = -1;

        /** Notes the live data if the old generation was collected since the last call (cheap: a few beans). */
        public synchronized void poll() {
            long old = collections()[0];
            if (old < 0 || old == oldSeen) {
                return;
            }
            long live = oldLiveBytes();
            if (live >= 0) {
                // collections between two polls are counted with the latest one's live data
                long collected = oldSeen < 0 ? 1 : old - oldSeen;
                liveSum += (double) live * collected;
                liveSeen += collected;
                liveMax = Math.max(liveMax, live);
            }
            oldSeen = old;
        }

        /**
         * The job's heap so far as a JSON object: {@code max_bytes}, {@code old_collections} and
         * {@code old_collection_s}, {@code young_collections} and {@code young_collection_s} since the job began,
         * and where an old collection was seen {@code live_bytes} (the mean live data after them) and
         * {@code live_max_bytes}. Unknown figures are left out.
         */
        public synchronized String json() {
            poll();
            long[] now = collections();
            StringBuilder w = new StringBuilder("{");
            long max = heapMaxBytes();
            if (max > 0) {
                w.append("\"max_bytes\":").append(max);
            }
            String[] names = {"old_collections", "old_collection_s", "young_collections", "young_collection_s"};
            for (int i = 0; i < 4; i += 2) {
                if (now[i] >= 0 && atStart[i] >= 0 && now[i + 1] >= 0 && atStart[i + 1] >= 0) {
                    w.append(w.length() > 1 ? "," : "").append('"').append(names[i]).append("\":")
                            .append(now[i] - atStart[i]).append(",\"").append(names[i + 1]).append("\":")
                            .append((now[i + 1] - atStart[i + 1]) / 1000.0);
                }
            }
            if (liveSeen > 0) {
                w.append(w.length() > 1 ? "," : "").append("\"live_bytes\":").append(Math.round(liveSum / liveSeen))
                        .append(",\"live_max_bytes\":").append(liveMax);
            }
            return w.append('}').toString();
        }
    }
}
