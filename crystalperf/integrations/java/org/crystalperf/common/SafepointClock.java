package org.crystalperf.common;

import java.io.RandomAccessFile;
import java.nio.ByteOrder;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;

/**
 * How long this JVM's Java threads have stood at safepoints, from HotSpot's own performance counters
 * ({@code sun.rt.safepointSyncTime}, the time to bring every thread to a stop, and {@code sun.rt.safepointTime}, the
 * time stopped, and {@code sun.rt.safepoints}, how many), read from the JVM's shared-memory file
 * (/tmp/hsperfdata_USER/PID) that {@code jstat} reads. No file (-XX:-UsePerfData, -XX:+PerfDisableSharedMem,
 * another JVM) or an unexpected layout: {@link #nanos()} is -1 and callers estimate otherwise. The counters are
 * updated by the VM thread; reading them takes no lock.
 */
public final class SafepointClock {
    private static final int MAGIC = 0xcafec0c0;
    private static final SafepointClock INSTANCE = open();

    private final MappedByteBuffer data;
    private final int syncOffset;
    private final int timeOffset;
    private final int countOffset;
    private final double nanosPerTick;

    private SafepointClock(MappedByteBuffer data, int syncOffset, int timeOffset, int countOffset,
                           double nanosPerTick) {
        this.data = data;
        this.syncOffset = syncOffset;
        this.timeOffset = timeOffset;
        this.countOffset = countOffset;
        this.nanosPerTick = nanosPerTick;
    }

    /** Safepoints this JVM has taken so far; -1 where it cannot say. */
    public static long count() {
        SafepointClock clock = INSTANCE;
        if (clock == null) {
            return -1;
        }
        try {
            return clock.data.getLong(clock.countOffset);
        } catch (RuntimeException e) {
            return -1;
        }
    }

    /** Nanoseconds this JVM's threads have spent reaching and at safepoints so far; -1 where it cannot say. */
    public static long nanos() {
        SafepointClock clock = INSTANCE;
        if (clock == null) {
            return -1;
        }
        try {
            return (long) ((clock.data.getLong(clock.syncOffset) + clock.data.getLong(clock.timeOffset))
                    * clock.nanosPerTick);
        } catch (RuntimeException e) {
            return -1;
        }
    }

    private static SafepointClock open() {
        try {
            // HotSpot on Linux keeps the file under /tmp whatever java.io.tmpdir says (Spark often moves that)
            Path file = Paths.get("/tmp", "hsperfdata_" + System.getProperty("user.name"),
                    Long.toString(ProcessHandle.current().pid()));
            if (!Files.isRegularFile(file)) {
                return null;
            }
            MappedByteBuffer data;
            try (RandomAccessFile raf = new RandomAccessFile(file.toFile(), "r");
                 FileChannel channel = raf.getChannel()) {
                data = channel.map(FileChannel.MapMode.READ_ONLY, 0, channel.size());
            }
            return parse(data);
        } catch (Exception | LinkageError e) {
            return null;
        }
    }

    /** The counters' places in a PerfData buffer (its prologue, then entries of name and value); null if absent. */
    static SafepointClock parse(MappedByteBuffer data) {
        data.order(ByteOrder.BIG_ENDIAN);
        if (data.limit() < 32 || data.getInt(0) != MAGIC) {
            return null;
        }
        data.order(data.get(4) == 1 ? ByteOrder.LITTLE_ENDIAN : ByteOrder.BIG_ENDIAN);
        int entry = data.getInt(24);
        int count = data.getInt(28);
        int sync = -1;
        int time = -1;
        int safepoints = -1;
        long frequency = -1;
        for (int i = 0; i < count && entry > 0 && entry + 20 <= data.limit(); i++) {
            int length = data.getInt(entry);
            int nameAt = entry + data.getInt(entry + 4);
            int vector = data.getInt(entry + 8);
            byte type = data.get(entry + 12);
            int valueAt = entry + data.getInt(entry + 16);
            if (length <= 0) {
                break;
            }
            if (type == 'J' && vector == 0 && valueAt + 8 <= data.limit()) {
                String name = name(data, nameAt);
                if ("sun.rt.safepointSyncTime".equals(name)) {
                    sync = valueAt;
                } else if ("sun.rt.safepointTime".equals(name)) {
                    time = valueAt;
                } else if ("sun.rt.safepoints".equals(name)) {
                    safepoints = valueAt;
                } else if ("sun.os.hrt.frequency".equals(name)) {
                    frequency = data.getLong(valueAt);
                }
            }
            entry += length;
        }
        if (sync < 0 || time < 0 || safepoints < 0 || frequency <= 0) {
            return null;
        }
        return new SafepointClock(data, sync, time, safepoints, 1e9 / frequency);
    }

    private static String name(MappedByteBuffer data, int at) {
        int end = at;
        while (end < data.limit() && data.get(end) != 0 && end - at < 256) {
            end++;
        }
        byte[] bytes = new byte[end - at];
        for (int i = 0; i < bytes.length; i++) {
            bytes[i] = data.get(at + i);
        }
        return new String(bytes, StandardCharsets.US_ASCII);
    }
}
