package org.crystalperf.common;

import java.io.IOException;
import java.io.RandomAccessFile;

/**
 * The calling thread's scheduler statistics (/proc/thread-self/schedstat, Linux 3.17+): nanoseconds on a core and
 * nanoseconds runnable but waiting for one. Each thread opens its own file once (the path names the thread that
 * opens it) and reads it again from offset 0: opening the file and splitting its text each time cost about 30 us a
 * read; this read costs ~4 us. The descriptor is closed when its thread ends and the holder is collected.
 */
public final class ThreadSchedstat {
    private static volatile boolean available = true;
    private static final ThreadLocal<ThreadSchedstat> OWN = new ThreadLocal<>();

    private final RandomAccessFile file;
    private final byte[] buffer = new byte[128];

    private ThreadSchedstat() throws IOException {
        file = new RandomAccessFile("/proc/thread-self/schedstat", "r");
    }

    /**
     * Nanoseconds the calling thread has been runnable but waiting for a core; -1 from the first time it cannot be
     * read (another OS, a kernel without schedstats): then nothing asks the kernel again.
     */
    public static long runQueueNs() {
        return field(1);
    }

    /** Nanoseconds the calling thread has been on a core; -1 where it cannot be read. */
    public static long onCpuNs() {
        return field(0);
    }

    private static long field(int index) {
        if (!available) {
            return -1;
        }
        try {
            ThreadSchedstat own = OWN.get();
            if (own == null) {
                own = new ThreadSchedstat();
                OWN.set(own);
            }
            own.file.seek(0);
            int n = own.file.read(own.buffer, 0, own.buffer.length);
            long value = field(own.buffer, Math.max(0, n), index);
            if (value < 0) {
                throw new IOException("unexpected /proc/thread-self/schedstat");
            }
            return value;
        } catch (Exception | LinkageError e) {
            available = false;
            return -1;
        }
    }

    /** The whitespace-separated decimal field {@code index} (from 0) of the first {@code n} bytes; -1 if none. */
    static long field(byte[] text, int n, int index) {
        int i = 0;
        for (int field = 0; field <= index; field++) {
            while (i < n && (text[i] == ' ' || text[i] == '\t')) {
                i++;
            }
            if (field < index) {
                while (i < n && text[i] >= '0' && text[i] <= '9') {
                    i++;
                }
            }
        }
        long value = 0;
        int digits = 0;
        while (i < n && text[i] >= '0' && text[i] <= '9' && digits < 19) {
            value = value * 10 + (text[i++] - '0');
            digits++;
        }
        return digits == 0 ? -1 : value;
    }
}
