package cpwork;

import static cpwork.Work.evict;

import java.io.*;
import java.sql.*;
import java.util.*;
import java.util.concurrent.*;

/** Storage libraries from Debian on files: LevelDB (iq80, pure Java, FileChannel mode: puts, synced puts,
 * gets past a small cache, iteration, compaction, reopen), SQLJet (pure-Java SQLite: transactions,
 * index lookups, scans, updates), lz4-java block and frame streams on big files opened with DSYNC, and
 * commons-dbcp2 (BasicDataSource, SharedPoolDataSource) and commons-pool2 (plain and keyed) pools, each
 * shared by more threads than it holds (borrowers wait), over H2 files and synced files. Before reading
 * back, the files' pages are dropped from the page cache (evict), so reads come from the disk. */
public final class LibStore {
    static volatile Object sink;

    static OutputStream dsync(File f) throws IOException {
        return java.nio.file.Files.newOutputStream(f.toPath(), java.nio.file.StandardOpenOption.CREATE, java.nio.file.StandardOpenOption.TRUNCATE_EXISTING,
            java.nio.file.StandardOpenOption.WRITE, java.nio.file.StandardOpenOption.DSYNC);
    }

    public static void main(String[] args) throws Exception {
        System.setProperty("leveldb.mmap", "false"); // FileChannel tables and logs: reads and writes are timed file I/O
        Work w = new Work(args);
        w.phase("leveldb", () -> {
            File dir = w.dir.resolve("leveldb").toFile();
            org.iq80.leveldb.Options options = new org.iq80.leveldb.Options().createIfMissing(true)
                .compressionType(org.iq80.leveldb.CompressionType.NONE).writeBufferSize(4 << 20).cacheSize(1 << 20)
                .maxOpenFiles(50);
            int n = 5_000 * w.scale;
            byte[] value = w.bytes(32 << 10);
            org.iq80.leveldb.WriteOptions sync = new org.iq80.leveldb.WriteOptions().sync(true);
            try (org.iq80.leveldb.DB db = org.iq80.leveldb.impl.Iq80DBFactory.factory.open(dir, options)) {
                for (int i = 0; i < n; i++) {
                    value[i % value.length] ^= (byte) i;
                    db.put(key(i * 7919 % n), value);
                }
                for (int i = 0; i < 1000 * w.scale; i++) db.put(key(n + i), Arrays.copyOf(value, 4096), sync);
                try (org.iq80.leveldb.WriteBatch batch = db.createWriteBatch()) {
                    for (int i = 0; i < 200; i++) batch.put(key(n + 10_000 + i), value);
                    db.write(batch, sync);
                }
            }
            evict(dir.toPath());
            try (org.iq80.leveldb.DB db = org.iq80.leveldb.impl.Iq80DBFactory.factory.open(dir, options)) {
                for (int i = 0; i < 3_000 * w.scale; i++) sink = db.get(key(i * 104_729 % n));
            }
            evict(dir.toPath());
            try (org.iq80.leveldb.DB db = org.iq80.leveldb.impl.Iq80DBFactory.factory.open(dir, options)) {
                try (org.iq80.leveldb.DBIterator it = db.iterator()) {
                    for (it.seekToFirst(); it.hasNext(); ) sink = it.next().getValue();
                }
                for (int i = 0; i < n; i += 3) db.delete(key(i));
                org.iq80.leveldb.impl.DbImpl impl = (org.iq80.leveldb.impl.DbImpl) db; // compactRange(byte[], byte[]) is not implemented
                impl.compactMemTable();
                for (int level = 0; level < 2; level++) impl.compactRange(level, new org.iq80.leveldb.util.Slice(key(0)), new org.iq80.leveldb.util.Slice(key(n + 20_000)));
            }
            evict(dir.toPath());
            try (org.iq80.leveldb.DB db = org.iq80.leveldb.impl.Iq80DBFactory.factory.open(dir, options)) {
                try (org.iq80.leveldb.DBIterator it = db.iterator()) {
                    for (it.seekToFirst(); it.hasNext(); ) sink = it.next().getValue();
                }
                for (int i = 0; i < 2_000 * w.scale; i++) sink = db.get(key(i * 31 % n));
            }
        });
        w.phase("sqljet", () -> {
            File file = w.dir.resolve("jet.sqlite").toFile();
            org.tmatesoft.sqljet.core.table.SqlJetDb db = org.tmatesoft.sqljet.core.table.SqlJetDb.open(file, true);
            try {
                db.runWriteTransaction(d -> {
                    d.getOptions().setCacheSize(200);
                    d.createTable("create table item (id integer primary key, name text not null, grp integer, payload blob)");
                    d.createIndex("create index item_name on item(name)");
                    d.createIndex("create index item_grp on item(grp)");
                    return null;
                });
                byte[] payload = w.bytes(4096);
                int rows = 0;
                for (int tx = 0; tx < 150 * w.scale; tx++) {
                    if (tx % 10 == 9) evict(file.toPath());
                    int base = rows;
                    db.runWriteTransaction(d -> {
                        org.tmatesoft.sqljet.core.table.ISqlJetTable t = d.getTable("item");
                        for (int i = 0; i < 40; i++) t.insert(null, "name-" + ((base + i) * 7919 % 100_000), (base + i) % 97, payload);
                        return null;
                    });
                    rows += 40;
                }
                int total = rows;
                for (int r = 0; r < 2; r++) {
                    evict(file.toPath());
                    db.runReadTransaction(d -> {
                        org.tmatesoft.sqljet.core.table.ISqlJetTable t = d.getTable("item");
                        for (int i = 0; i < 1500; i++) {
                            if (i % 250 == 0) evict(file.toPath());
                            org.tmatesoft.sqljet.core.table.ISqlJetCursor c = t.lookup("item_name", "name-" + (i * 7919 % 100_000));
                            try { while (!c.eof()) { sink = c.getBlobAsArray("payload"); c.next(); } } finally { c.close(); }
                        }
                        evict(file.toPath());
                        org.tmatesoft.sqljet.core.table.ISqlJetCursor c = t.open();
                        try { while (!c.eof()) { sink = c.getString("name"); c.next(); } } finally { c.close(); }
                        return null;
                    });
                }
                for (int g = 0; g < 20; g++) {
                    int grp = g;
                    if (g % 4 == 0) evict(file.toPath());
                    db.runWriteTransaction(d -> {
                        org.tmatesoft.sqljet.core.table.ISqlJetCursor c = d.getTable("item").lookup("item_grp", (long) grp);
                        try {
                            while (!c.eof()) {
                                if (c.getRowId() % 2 == 0) c.delete();
                                else { c.update(c.getRowId(), c.getString("name") + "x", (long) grp, payload); c.next(); }
                            }
                        } finally { c.close(); }
                        return null;
                    });
                }
                sink = total;
            } finally {
                db.close();
            }
        });
        w.phase("lz4", () -> {
            byte[] random = w.bytes(8 << 20);
            byte[] text = w.text(8 << 20);
            int chunks = 12 * w.scale;
            net.jpountz.lz4.LZ4Factory lz4 = net.jpountz.lz4.LZ4Factory.fastestInstance();
            for (int r = 0; r < 2; r++) {
                File block = w.dir.resolve("a.lz4b").toFile();
                try (OutputStream out = new net.jpountz.lz4.LZ4BlockOutputStream(dsync(block), 1 << 16, lz4.fastCompressor(),
                         net.jpountz.xxhash.XXHashFactory.fastestInstance().newStreamingHash32(0x9747b28c).asChecksum(), true)) {
                    for (int i = 0; i < chunks; i++) {
                        out.write(i % 4 == 0 ? text : random);
                        if (i % 2 == 1) out.flush();
                    }
                }
                File frame = w.dir.resolve("a.lz4").toFile();
                try (OutputStream out = new net.jpountz.lz4.LZ4FrameOutputStream(dsync(frame), net.jpountz.lz4.LZ4FrameOutputStream.BLOCKSIZE.SIZE_64KB)) {
                    for (int i = 0; i < chunks; i++) {
                        out.write(i % 4 == 0 ? text : random);
                        if (i % 2 == 1) out.flush();
                    }
                }
                evict(w.dir);
                try (InputStream in = new net.jpountz.lz4.LZ4BlockInputStream(new FileInputStream(block))) {
                    byte[] buf = new byte[1 << 16];
                    while (in.read(buf) > 0) { }
                }
                try (InputStream in = new net.jpountz.lz4.LZ4FrameInputStream(new FileInputStream(frame))) {
                    byte[] buf = new byte[1 << 16];
                    while (in.read(buf) > 0) { }
                }
                evict(w.dir);
                try (InputStream in = new net.jpountz.lz4.LZ4FrameInputStream(new FileInputStream(frame));
                     OutputStream out = new net.jpountz.lz4.LZ4BlockOutputStream(dsync(w.dir.resolve("b.lz4b").toFile()), 1 << 18)) {
                    in.transferTo(out);
                }
            }
        });
        w.phase("dbcp2-h2", () -> {
            String url = "jdbc:h2:file:" + w.dir.resolve("pooled").toAbsolutePath() + ";WRITE_DELAY=0";
            org.apache.commons.dbcp2.BasicDataSource ds = new org.apache.commons.dbcp2.BasicDataSource();
            ds.setUrl(url);
            ds.setUsername("sa");
            ds.setPassword("");
            ds.setMaxTotal(2);
            ds.setMaxIdle(2);
            ds.setMaxWaitMillis(60_000);
            ds.setTestOnBorrow(true);
            ds.setValidationQuery("select 1");
            ds.setDefaultAutoCommit(false);
            try {
                try (Connection c = ds.getConnection(); Statement s = c.createStatement()) {
                    s.execute("create table if not exists ev (id bigint auto_increment primary key, who int, body varchar(4000))");
                    c.commit();
                }
                String body = new String(w.text(3000));
                int threads = 8;
                int perThread = 40 * w.scale;
                ExecutorService pool = Executors.newFixedThreadPool(threads);
                List<Future<?>> done = new ArrayList<>();
                for (int t = 0; t < threads; t++) {
                    int who = t;
                    done.add(pool.submit(() -> {
                        for (int i = 0; i < perThread; i++) {
                            try (Connection c = ds.getConnection();
                                 PreparedStatement ps = c.prepareStatement("insert into ev(who, body) values (?, ?)")) {
                                for (int k = 0; k < 20; k++) { ps.setInt(1, who); ps.setString(2, body); ps.addBatch(); }
                                ps.executeBatch();
                                c.commit();
                                if (i % 5 == 0) try (Statement s = c.createStatement()) { s.execute("checkpoint sync"); }
                                try (PreparedStatement q = c.prepareStatement("select count(*), max(id) from ev where who = ?")) {
                                    q.setInt(1, who);
                                    try (ResultSet rs = q.executeQuery()) { while (rs.next()) sink = rs.getLong(1); }
                                }
                            }
                        }
                        return null;
                    }));
                }
                for (Future<?> f : done) f.get();
                pool.shutdown();
            } finally {
                ds.close();
            }
            // The same through dbcp2's ConnectionPoolDataSource adapter and SharedPoolDataSource (a keyed pool).
            org.apache.commons.dbcp2.cpdsadapter.DriverAdapterCPDS cpds = new org.apache.commons.dbcp2.cpdsadapter.DriverAdapterCPDS();
            cpds.setDriver("org.h2.Driver");
            cpds.setUrl(url);
            cpds.setUser("sa");
            cpds.setPassword("");
            org.apache.commons.dbcp2.datasources.SharedPoolDataSource shared = new org.apache.commons.dbcp2.datasources.SharedPoolDataSource();
            shared.setConnectionPoolDataSource(cpds);
            shared.setMaxTotal(2);
            shared.setDefaultMaxWaitMillis(60_000);
            shared.setDefaultAutoCommit(false);
            try {
                String body = new String(w.text(3000));
                ExecutorService pool = Executors.newFixedThreadPool(6);
                List<Future<?>> done = new ArrayList<>();
                for (int t = 0; t < 6; t++) {
                    int who = 100 + t;
                    done.add(pool.submit(() -> {
                        for (int i = 0; i < 30 * w.scale; i++) {
                            try (Connection c = shared.getConnection("sa", "");
                                 PreparedStatement ps = c.prepareStatement("insert into ev(who, body) values (?, ?)")) {
                                for (int k = 0; k < 20; k++) { ps.setInt(1, who); ps.setString(2, body); ps.addBatch(); }
                                ps.executeBatch();
                                c.commit();
                                if (i % 5 == 0) try (Statement s = c.createStatement()) { s.execute("checkpoint sync"); }
                            }
                        }
                        return null;
                    }));
                }
                for (Future<?> f : done) f.get();
                pool.shutdown();
            } finally {
                shared.close();
            }
            // commons-pool2 on its own: two file handles shared by six writers that sync what they write.
            org.apache.commons.pool2.impl.GenericObjectPoolConfig<RandomAccessFile> config = new org.apache.commons.pool2.impl.GenericObjectPoolConfig<>();
            config.setMaxTotal(2);
            config.setMaxWaitMillis(60_000);
            int[] made = {0};
            try (org.apache.commons.pool2.impl.GenericObjectPool<RandomAccessFile> files = new org.apache.commons.pool2.impl.GenericObjectPool<>(
                     new org.apache.commons.pool2.BasePooledObjectFactory<RandomAccessFile>() {
                         @Override public RandomAccessFile create() throws Exception {
                             synchronized (made) { return new RandomAccessFile(w.dir.resolve("pooled-" + made[0]++ + ".bin").toFile(), "rw"); }
                         }
                         @Override public org.apache.commons.pool2.PooledObject<RandomAccessFile> wrap(RandomAccessFile f) {
                             return new org.apache.commons.pool2.impl.DefaultPooledObject<>(f);
                         }
                         @Override public void destroyObject(org.apache.commons.pool2.PooledObject<RandomAccessFile> p) throws Exception { p.getObject().close(); }
                     }, config)) {
                byte[] block = w.bytes(64 << 10);
                ExecutorService pool = Executors.newFixedThreadPool(6);
                List<Future<?>> done = new ArrayList<>();
                for (int t = 0; t < 6; t++) {
                    done.add(pool.submit(() -> {
                        for (int i = 0; i < 40 * w.scale; i++) {
                            RandomAccessFile f = files.borrowObject();
                            try {
                                f.write(block);
                                f.getFD().sync();
                            } finally {
                                files.returnObject(f);
                            }
                        }
                        return null;
                    }));
                }
                for (Future<?> f : done) f.get();
                pool.shutdown();
            }
            // A keyed pool: one handle per file, three writers per file.
            org.apache.commons.pool2.impl.GenericKeyedObjectPoolConfig<RandomAccessFile> keyedConfig = new org.apache.commons.pool2.impl.GenericKeyedObjectPoolConfig<>();
            keyedConfig.setMaxTotalPerKey(1);
            keyedConfig.setMaxWaitMillis(60_000);
            try (org.apache.commons.pool2.impl.GenericKeyedObjectPool<String, RandomAccessFile> keyed = new org.apache.commons.pool2.impl.GenericKeyedObjectPool<>(
                     new org.apache.commons.pool2.BaseKeyedPooledObjectFactory<String, RandomAccessFile>() {
                         @Override public RandomAccessFile create(String key) throws Exception { return new RandomAccessFile(w.dir.resolve("keyed-" + key + ".bin").toFile(), "rw"); }
                         @Override public org.apache.commons.pool2.PooledObject<RandomAccessFile> wrap(RandomAccessFile f) {
                             return new org.apache.commons.pool2.impl.DefaultPooledObject<>(f);
                         }
                         @Override public void destroyObject(String key, org.apache.commons.pool2.PooledObject<RandomAccessFile> p) throws Exception { p.getObject().close(); }
                     }, keyedConfig)) {
                byte[] block = w.bytes(64 << 10);
                ExecutorService pool = Executors.newFixedThreadPool(6);
                List<Future<?>> done = new ArrayList<>();
                for (int t = 0; t < 6; t++) {
                    String key = t % 2 == 0 ? "even" : "odd";
                    done.add(pool.submit(() -> {
                        for (int i = 0; i < 30 * w.scale; i++) {
                            RandomAccessFile f = keyed.borrowObject(key);
                            try {
                                f.write(block);
                                f.getFD().sync();
                            } finally {
                                keyed.returnObject(key, f);
                            }
                        }
                        return null;
                    }));
                }
                for (Future<?> f : done) f.get();
                pool.shutdown();
            }
        });
    }

    static byte[] key(int i) {
        return String.format("key-%09d", i).getBytes();
    }
}
