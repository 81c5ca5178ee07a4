package cpwork;

import static cpwork.Work.evict;
import static cpwork.Work.pause;

import java.io.*;
import java.net.*;
import java.nio.file.*;
import java.sql.*;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;

/** Data-plane libraries from Debian: SQLite files through the xerial JDBC driver behind HikariCP pools
 * smaller than their threads (borrowers wait), Avro data files (null, deflate and snappy codecs, synced
 * blocks, reads after a page-cache drop, random seeks to sync markers) and Avro container streams over
 * loopback sockets with a slow reader and a paced writer, Kryo object graphs to synced files, back from
 * cold files and over sockets to a peer that acknowledges a little late, and an Ehcache 2 cache that
 * overflows to its disk store and is read back from it by several threads. */
public final class LibData {
    static volatile Object sink;

    public static void main(String[] args) throws Exception {
        System.setProperty("net.sf.ehcache.skipUpdateCheck", "true");
        Work w = new Work(args);
        w.phase("sqlite-hikari", () -> sqliteHikari(w));
        w.phase("avro", () -> avroFiles(w));
        w.phase("avro-stream", () -> avroStream(w));
        w.phase("kryo", () -> kryo(w));
        w.phase("ehcache", () -> ehcache(w));
    }

    // ---------------------------------------------------------------------------------------------
    // SQLite (xerial sqlite-jdbc) with HikariCP

    static com.zaxxer.hikari.HikariDataSource pool(String url, int size, String name) {
        com.zaxxer.hikari.HikariConfig c = new com.zaxxer.hikari.HikariConfig();
        c.setJdbcUrl(url);
        c.setMaximumPoolSize(size);
        c.setMinimumIdle(size);
        c.setConnectionTimeout(120_000);
        c.setPoolName(name);
        c.setAutoCommit(true);
        // WAL: readers do not block the writer; synchronous=OFF: the engine's own (native) work stays CPU-bound
        c.setConnectionInitSql("PRAGMA synchronous=OFF");
        return new com.zaxxer.hikari.HikariDataSource(c);
    }

    static void sqliteHikari(Work w) throws Exception {
        String url = "jdbc:sqlite:" + w.dir.resolve("events.db");
        try (Connection c = DriverManager.getConnection(url); Statement s = c.createStatement()) {
            s.execute("PRAGMA journal_mode=WAL");
            s.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, stage INTEGER, host TEXT, payload BLOB, score REAL)");
            s.execute("CREATE INDEX events_stage ON events(stage)");
        }
        byte[] payload = w.bytes(2048);
        // Writers: four threads through a pool of one connection (SQLite has one writer anyway).
        try (com.zaxxer.hikari.HikariDataSource writers = pool(url, 1, "sqlite-writers")) {
            ExecutorService threads = Executors.newFixedThreadPool(4);
            try {
                List<Future<?>> done = new ArrayList<>();
                for (int t = 0; t < 4; t++) {
                    int base = t;
                    done.add(threads.submit(() -> {
                        for (int batch = 0; batch < 60 * w.scale; batch++) {
                            try (Connection c = writers.getConnection()) {
                                c.setAutoCommit(false);
                                try (PreparedStatement ps = c.prepareStatement("INSERT INTO events (stage, host, payload, score) VALUES (?, ?, ?, ?)")) {
                                    for (int i = 0; i < 50; i++) {
                                        ps.setInt(1, (base * 7 + batch + i) % 200);
                                        ps.setString(2, "host-" + (i % 16) + ".cluster.local");
                                        ps.setBytes(3, payload);
                                        ps.setDouble(4, i * 0.5);
                                        ps.addBatch();
                                    }
                                    ps.executeBatch();
                                }
                                c.commit();
                                c.setAutoCommit(true);
                                pause(1); // the writer holds its connection over a remote acknowledgement
                            }
                        }
                        return null;
                    }));
                }
                for (Future<?> f : done) f.get();
            } finally {
                threads.shutdownNow();
            }
        }
        // Readers: eight threads, two connections; each borrower holds its connection over a short think time.
        try (com.zaxxer.hikari.HikariDataSource readers = pool(url, 2, "sqlite-readers")) {
            ExecutorService threads = Executors.newFixedThreadPool(8);
            try {
                List<Future<?>> done = new ArrayList<>();
                for (int t = 0; t < 8; t++) {
                    int base = t;
                    done.add(threads.submit(() -> {
                        for (int i = 0; i < 120 * w.scale; i++) {
                            try (Connection c = readers.getConnection();
                                 PreparedStatement ps = c.prepareStatement("SELECT id, host, length(payload), score FROM events WHERE stage = ? ORDER BY id LIMIT 50")) {
                                ps.setInt(1, (base * 13 + i) % 200);
                                try (ResultSet rs = ps.executeQuery()) {
                                    long sum = 0;
                                    while (rs.next()) sum += rs.getLong(1) + rs.getInt(3) + rs.getString(2).length();
                                    sink = sum;
                                }
                                pause(2);
                            }
                        }
                        return null;
                    }));
                }
                for (Future<?> f : done) f.get();
            } finally {
                threads.shutdownNow();
            }
        }
    }

    // ---------------------------------------------------------------------------------------------
    // Avro

    static final String SCHEMA = "{\"type\":\"record\",\"name\":\"Block\",\"namespace\":\"cp\",\"fields\":["
        + "{\"name\":\"id\",\"type\":\"long\"},{\"name\":\"host\",\"type\":\"string\"},"
        + "{\"name\":\"tags\",\"type\":{\"type\":\"array\",\"items\":\"string\"}},"
        + "{\"name\":\"counters\",\"type\":{\"type\":\"map\",\"values\":\"long\"}},"
        + "{\"name\":\"payload\",\"type\":\"bytes\"},{\"name\":\"score\",\"type\":[\"null\",\"double\"]}]}";

    static org.apache.avro.generic.GenericRecord record(org.apache.avro.Schema schema, long i, byte[] payload) {
        org.apache.avro.generic.GenericRecord r = new org.apache.avro.generic.GenericData.Record(schema);
        r.put("id", i);
        r.put("host", "executor-" + (i % 32));
        r.put("tags", List.of("stage-" + (i % 7), "part-" + (i % 200)));
        r.put("counters", Map.of("read", i, "written", i * 2));
        r.put("payload", java.nio.ByteBuffer.wrap(payload, 0, 512 + (int) (i % 3000)));
        r.put("score", i % 5 == 0 ? null : i * 0.25);
        return r;
    }

    static void avroFiles(Work w) throws Exception {
        org.apache.avro.Schema schema = new org.apache.avro.Schema.Parser().parse(SCHEMA);
        byte[] payload = w.text(4096);
        org.apache.avro.file.CodecFactory[] codecs = {org.apache.avro.file.CodecFactory.nullCodec(),
            org.apache.avro.file.CodecFactory.deflateCodec(1), org.apache.avro.file.CodecFactory.snappyCodec()};
        int n = 40_000 * w.scale;
        for (int k = 0; k < codecs.length; k++) {
            File f = w.dir.resolve("blocks-" + k + ".avro").toFile();
            try (org.apache.avro.file.DataFileWriter<org.apache.avro.generic.GenericRecord> out =
                     new org.apache.avro.file.DataFileWriter<>(new org.apache.avro.generic.GenericDatumWriter<org.apache.avro.generic.GenericRecord>(schema))) {
                out.setCodec(codecs[k]);
                out.setSyncInterval(64 << 10);
                out.setMeta("writer", "crystalperf");
                out.create(schema, f);
                for (long i = 0; i < n; i++) {
                    out.append(record(schema, i, payload));
                    if (i % 2000 == 1999) out.fSync(); // a committed block: flushed and forced to the disk
                }
            }
            // Appending to the existing file, then reading it back cold, whole and by seeks to sync markers.
            try (org.apache.avro.file.DataFileWriter<org.apache.avro.generic.GenericRecord> out =
                     new org.apache.avro.file.DataFileWriter<>(new org.apache.avro.generic.GenericDatumWriter<org.apache.avro.generic.GenericRecord>(schema)).appendTo(f)) {
                for (long i = n; i < n + 2000; i++) out.append(record(schema, i, payload));
                out.fSync();
            }
            evict(f.toPath());
            try (org.apache.avro.file.DataFileReader<org.apache.avro.generic.GenericRecord> in =
                     new org.apache.avro.file.DataFileReader<>(f, new org.apache.avro.generic.GenericDatumReader<org.apache.avro.generic.GenericRecord>())) {
                org.apache.avro.generic.GenericRecord reuse = null;
                long sum = 0;
                while (in.hasNext()) { reuse = in.next(reuse); sum += (Long) reuse.get("id"); }
                sink = sum;
            }
            evict(f.toPath());
            try (org.apache.avro.file.DataFileReader<org.apache.avro.generic.GenericRecord> in =
                     new org.apache.avro.file.DataFileReader<>(f, new org.apache.avro.generic.GenericDatumReader<org.apache.avro.generic.GenericRecord>())) {
                long length = f.length();
                Random r = new Random(k);
                for (int i = 0; i < 40; i++) { // sync() scans for the marker a byte at a time
                    in.sync((long) (r.nextDouble() * length));
                    for (int j = 0; j < 5 && in.hasNext(); j++) sink = in.next();
                }
            }
        }
    }

    /** Avro container streams over loopback: first the reader is slow (the writer waits to send), then the
     * writer is paced (the reader waits for blocks). */
    static void avroStream(Work w) throws Exception {
        org.apache.avro.Schema schema = new org.apache.avro.Schema.Parser().parse(SCHEMA);
        byte[] payload = w.text(4096);
        for (int mode = 0; mode < 2; mode++) {
            boolean slowReader = mode == 0;
            try (ServerSocket ss = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
                int n = 30_000 * w.scale;
                Future<Long> reader = Executors.newSingleThreadExecutor(daemon()).submit(() -> {
                    try (Socket s = ss.accept(); InputStream in = s.getInputStream();
                         org.apache.avro.file.DataFileStream<org.apache.avro.generic.GenericRecord> stream =
                             new org.apache.avro.file.DataFileStream<>(in, new org.apache.avro.generic.GenericDatumReader<org.apache.avro.generic.GenericRecord>())) {
                        long count = 0;
                        org.apache.avro.generic.GenericRecord reuse = null;
                        while (stream.hasNext()) {
                            reuse = stream.next(reuse);
                            if (slowReader && ++count % 100 == 0) pause(1);
                            else if (!slowReader) count++;
                        }
                        return count;
                    }
                });
                try (Socket s = new Socket(InetAddress.getLoopbackAddress(), ss.getLocalPort());
                     org.apache.avro.file.DataFileWriter<org.apache.avro.generic.GenericRecord> out =
                         new org.apache.avro.file.DataFileWriter<>(new org.apache.avro.generic.GenericDatumWriter<org.apache.avro.generic.GenericRecord>(schema))) {
                    s.setSendBufferSize(64 << 10);
                    out.setCodec(org.apache.avro.file.CodecFactory.nullCodec());
                    out.setSyncInterval(32 << 10);
                    out.create(schema, s.getOutputStream());
                    for (long i = 0; i < n; i++) {
                        out.append(record(schema, i, payload));
                        if (!slowReader && i % 20 == 19) { out.flush(); pause(1); }
                    }
                }
                if (reader.get(300, TimeUnit.SECONDS) != n) throw new IOException("avro stream lost records");
            }
        }
    }

    // ---------------------------------------------------------------------------------------------
    // Kryo

    public static final class Task {
        public long id;
        public String name;
        public List<String> deps = new ArrayList<>();
        public Map<String, Long> counters = new HashMap<>();
        public double[] metrics;
        public byte[] blob;
        public Task parent;

        public Task() { }
    }

    static Task task(long i, Task parent, byte[] blob) {
        Task t = new Task();
        t.id = i;
        t.name = "task-" + i + "-stage-" + (i % 11);
        for (int d = 0; d < 4; d++) t.deps.add("shuffle-" + (i - d) + "-" + d);
        t.counters.put("records", i * 3);
        t.counters.put("bytes", i * 1024);
        t.metrics = new double[] {i, i * 0.5, i * 0.25, 1.0 / (i + 1)};
        t.blob = blob;
        t.parent = parent;
        return t;
    }

    static com.esotericsoftware.kryo.Kryo kryo() {
        com.esotericsoftware.kryo.Kryo k = new com.esotericsoftware.kryo.Kryo();
        k.setReferences(true);
        k.register(Task.class);
        k.register(ArrayList.class);
        k.register(HashMap.class);
        k.register(double[].class);
        k.register(byte[].class);
        return k;
    }

    static void kryo(Work w) throws Exception {
        com.esotericsoftware.kryo.Kryo k = kryo();
        byte[] blob = w.bytes(2048);
        int n = 20_000 * w.scale;
        // Object graphs (a parent chain shared by references) to a file, read back after a page-cache drop.
        Path file = w.dir.resolve("tasks.kryo");
        for (int round = 0; round < 2; round++) {
            int count = round == 0 ? n / 5 : n; // the first round's file is DSYNC: every buffer written through to the disk
            try (OutputStream os = Files.newOutputStream(file, StandardOpenOption.CREATE, StandardOpenOption.TRUNCATE_EXISTING,
                     StandardOpenOption.WRITE, round == 0 ? StandardOpenOption.DSYNC : StandardOpenOption.WRITE);
                 com.esotericsoftware.kryo.io.Output out = new com.esotericsoftware.kryo.io.Output(os, round == 0 ? 16 << 10 : 4096)) {
                Task parent = null;
                for (int i = 0; i < count; i++) {
                    Task t = task(i, i % 50 == 0 ? null : parent, blob);
                    k.writeObject(out, t);
                    parent = t;
                }
            }
            evict(file);
            try (com.esotericsoftware.kryo.io.Input in = new com.esotericsoftware.kryo.io.Input(Files.newInputStream(file), 4096)) {
                for (int i = 0; i < count; i++) sink = k.readObject(in, Task.class);
            }
        }
        // Over a socket: a peer reads each batch and acknowledges it a little later.
        try (ServerSocket ss = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            Future<?> peer = Executors.newSingleThreadExecutor(daemon()).submit(() -> {
                com.esotericsoftware.kryo.Kryo pk = kryo();
                try (Socket s = accepted(ss);
                     com.esotericsoftware.kryo.io.Input in = new com.esotericsoftware.kryo.io.Input(s.getInputStream(), 8192);
                     com.esotericsoftware.kryo.io.Output out = new com.esotericsoftware.kryo.io.Output(s.getOutputStream(), 256)) {
                    while (true) {
                        int count = in.readInt();
                        if (count < 0) return null;
                        long sum = 0;
                        for (int i = 0; i < count; i++) sum += pk.readObject(in, Task.class).id;
                        pause(2);
                        out.writeLong(sum);
                        out.flush();
                    }
                }
            });
            try (Socket s = noDelay(new Socket(InetAddress.getLoopbackAddress(), ss.getLocalPort()));
                 com.esotericsoftware.kryo.io.Output out = new com.esotericsoftware.kryo.io.Output(s.getOutputStream(), 8192);
                 com.esotericsoftware.kryo.io.Input in = new com.esotericsoftware.kryo.io.Input(s.getInputStream(), 256)) {
                Task parent = null;
                for (int batch = 0; batch < 1500 * w.scale; batch++) {
                    out.writeInt(20);
                    for (int i = 0; i < 20; i++) {
                        Task t = task(batch * 20L + i, parent, blob);
                        k.writeObject(out, t);
                        parent = i % 5 == 0 ? null : t;
                    }
                    out.flush();
                    sink = in.readLong();
                }
                out.writeInt(-1);
                out.flush();
            }
            peer.get(120, TimeUnit.SECONDS);
        }
    }

    // ---------------------------------------------------------------------------------------------
    // Ehcache 2 disk store

    static void ehcache(Work w) throws Exception {
        net.sf.ehcache.config.Configuration config = new net.sf.ehcache.config.Configuration()
            .diskStore(new net.sf.ehcache.config.DiskStoreConfiguration().path(w.dir.resolve("ehcache").toString()))
            .updateCheck(false);
        config.setName("cp-" + System.nanoTime());
        net.sf.ehcache.CacheManager manager = new net.sf.ehcache.CacheManager(config);
        try {
            net.sf.ehcache.config.CacheConfiguration cc = new net.sf.ehcache.config.CacheConfiguration("blocks", 200)
                .overflowToDisk(true).maxEntriesLocalDisk(1_000_000).diskSpoolBufferSizeMB(4).eternal(true);
            net.sf.ehcache.Cache cache = new net.sf.ehcache.Cache(cc);
            manager.addCache(cache);
            int n = 1_500 * w.scale;
            byte[] value = w.bytes(128 << 10);
            for (int i = 0; i < n; i++) {
                byte[] v = value.clone();
                v[0] = (byte) i;
                cache.put(new net.sf.ehcache.Element("block-" + i, v));
            }
            cache.flush();
            long deadline = System.nanoTime() + 60_000_000_000L;
            while (cache.getDiskStoreSize() < n - 200 && System.nanoTime() < deadline) pause(10);
            evict(w.dir.resolve("ehcache"));
            ExecutorService readers = Executors.newFixedThreadPool(1); // one reader: DiskStorageFactory.read locks its file
            try {
                List<Future<?>> done = new ArrayList<>();
                for (int t = 0; t < 1; t++) {
                    int base = t;
                    done.add(readers.submit(() -> {
                        Random r = new Random(base);
                        for (int i = 0; i < 2500 * w.scale; i++) {
                            net.sf.ehcache.Element e = cache.get("block-" + r.nextInt(n));
                            if (e != null) sink = e.getObjectValue();
                        }
                        return null;
                    }));
                }
                for (Future<?> f : done) f.get();
            } finally {
                readers.shutdownNow();
            }
            for (int i = 0; i < n; i += 3) cache.remove("block-" + i);
        } finally {
            manager.shutdown();
        }
    }

    /** TCP_NODELAY: small acknowledgements are not held back by Nagle's algorithm and delayed ACKs. */
    static Socket noDelay(Socket s) throws SocketException {
        s.setTcpNoDelay(true);
        return s;
    }

    static Socket accepted(ServerSocket ss) throws IOException {
        return noDelay(ss.accept());
    }

    static ThreadFactory daemon() {
        return r -> { Thread t = new Thread(r); t.setDaemon(true); return t; };
    }
}
