package cpwork;

import static cpwork.Work.evict;
import static cpwork.Work.pause;

import java.io.*;
import java.net.*;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.*;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;

/** RPC, coordination and hand-off libraries from Debian, the kind a cluster's control and data planes use:
 * Apache Thrift (a block service written by hand against TProtocol, no generated code: a thread-pool server
 * over TSocket with the binary protocol, a multiplexed processor, a half-sync/half-async server over framed
 * transport with the compact protocol, records in a TSimpleFileTransport file), Apache ZooKeeper (an
 * in-process ZooKeeperServer on temp directories, synced transaction log and snapshots, clients creating,
 * setting, reading, watching, in multi-ops and asynchronously, and a restart that replays the log) and the
 * LMAX Disruptor (ring buffers between threads with blocking wait strategies: a journaller forcing a file, a
 * replicator writing to a slow socket peer, producers that outrun them and consumers that outrun the
 * producers). The Thrift servers answer a few ms late, so clients wait on the network; pools and ring
 * buffers are smaller than what is pushed through them, so threads wait. */
public final class LibRpc {
    static volatile Object sink;
    static final int REPLY_DELAY_MS = 2;

    public static void main(String[] args) throws Exception {
        Work w = new Work(args);
        w.phase("thrift", () -> thrift(w));
        w.phase("thrift-hsha", () -> thriftHsHa(w));
        w.phase("thrift-file", () -> thriftFile(w));
        w.phase("zookeeper", () -> zookeeper(w));
        w.phase("disruptor", () -> disruptor(w));
    }

    // ---------------------------------------------------------------------------------------------
    // Thrift: a block service by hand

    /** fetch(block id, length) -> bytes read from the block file; put(block id, bytes) -> length written;
     * meta(names) -> list of longs. Each reply waits a little before it is written. */
    static final class BlockService implements org.apache.thrift.TProcessor {
        final RandomAccessFile blocks;
        final int delayMs;

        BlockService(Path file, int delayMs) throws IOException {
            this.blocks = new RandomAccessFile(file.toFile(), "rw");
            this.delayMs = delayMs;
        }

        @Override public void process(org.apache.thrift.protocol.TProtocol in, org.apache.thrift.protocol.TProtocol out) throws org.apache.thrift.TException {
            org.apache.thrift.protocol.TMessage m = in.readMessageBegin();
            long block = 0;
            int length = 0;
            ByteBuffer data = null;
            List<String> names = new ArrayList<>();
            in.readStructBegin();
            while (true) {
                org.apache.thrift.protocol.TField f = in.readFieldBegin();
                if (f.type == org.apache.thrift.protocol.TType.STOP) break;
                switch (f.id) {
                    case 1 -> block = in.readI64();
                    case 2 -> length = in.readI32();
                    case 3 -> data = in.readBinary();
                    case 4 -> {
                        org.apache.thrift.protocol.TList l = in.readListBegin();
                        for (int i = 0; i < l.size; i++) names.add(in.readString());
                        in.readListEnd();
                    }
                    default -> org.apache.thrift.protocol.TProtocolUtil.skip(in, f.type);
                }
                in.readFieldEnd();
            }
            in.readStructEnd();
            in.readMessageEnd();
            pause(delayMs);
            out.writeMessageBegin(new org.apache.thrift.protocol.TMessage(m.name, org.apache.thrift.protocol.TMessageType.REPLY, m.seqid));
            out.writeStructBegin(new org.apache.thrift.protocol.TStruct("result"));
            try {
                switch (m.name) {
                    case "fetch" -> {
                        byte[] b = new byte[length];
                        synchronized (blocks) {
                            blocks.seek(block * 4096 % Math.max(1, blocks.length() - length));
                            blocks.readFully(b);
                        }
                        out.writeFieldBegin(new org.apache.thrift.protocol.TField("success", org.apache.thrift.protocol.TType.STRING, (short) 0));
                        out.writeBinary(ByteBuffer.wrap(b));
                    }
                    case "put" -> {
                        synchronized (blocks) {
                            blocks.seek(block * 4096);
                            blocks.write(data.array(), data.arrayOffset() + data.position(), data.remaining());
                        }
                        out.writeFieldBegin(new org.apache.thrift.protocol.TField("success", org.apache.thrift.protocol.TType.I64, (short) 0));
                        out.writeI64(data.remaining());
                    }
                    default -> {
                        out.writeFieldBegin(new org.apache.thrift.protocol.TField("success", org.apache.thrift.protocol.TType.LIST, (short) 0));
                        out.writeListBegin(new org.apache.thrift.protocol.TList(org.apache.thrift.protocol.TType.I64, names.size()));
                        for (String n : names) out.writeI64(n.hashCode());
                        out.writeListEnd();
                    }
                }
            } catch (IOException e) {
                throw new org.apache.thrift.TException(e);
            }
            out.writeFieldEnd();
            out.writeFieldStop();
            out.writeStructEnd();
            out.writeMessageEnd();
            out.getTransport().flush();
        }
    }

    /** One call as a generated client would make it: args struct out, result struct back. */
    static Object call(org.apache.thrift.protocol.TProtocol p, String method, int seq, long block, int length, byte[] data, List<String> names)
            throws org.apache.thrift.TException {
        p.writeMessageBegin(new org.apache.thrift.protocol.TMessage(method, org.apache.thrift.protocol.TMessageType.CALL, seq));
        p.writeStructBegin(new org.apache.thrift.protocol.TStruct(method + "_args"));
        p.writeFieldBegin(new org.apache.thrift.protocol.TField("block", org.apache.thrift.protocol.TType.I64, (short) 1));
        p.writeI64(block);
        p.writeFieldEnd();
        p.writeFieldBegin(new org.apache.thrift.protocol.TField("length", org.apache.thrift.protocol.TType.I32, (short) 2));
        p.writeI32(length);
        p.writeFieldEnd();
        if (data != null) {
            p.writeFieldBegin(new org.apache.thrift.protocol.TField("data", org.apache.thrift.protocol.TType.STRING, (short) 3));
            p.writeBinary(ByteBuffer.wrap(data));
            p.writeFieldEnd();
        }
        if (names != null) {
            p.writeFieldBegin(new org.apache.thrift.protocol.TField("names", org.apache.thrift.protocol.TType.LIST, (short) 4));
            p.writeListBegin(new org.apache.thrift.protocol.TList(org.apache.thrift.protocol.TType.STRING, names.size()));
            for (String n : names) p.writeString(n);
            p.writeListEnd();
            p.writeFieldEnd();
        }
        p.writeFieldStop();
        p.writeStructEnd();
        p.writeMessageEnd();
        p.getTransport().flush();
        org.apache.thrift.protocol.TMessage m = p.readMessageBegin();
        if (m.type == org.apache.thrift.protocol.TMessageType.EXCEPTION) {
            org.apache.thrift.TApplicationException x = org.apache.thrift.TApplicationException.readFrom(p);
            p.readMessageEnd();
            throw x;
        }
        Object result = null;
        p.readStructBegin();
        while (true) {
            org.apache.thrift.protocol.TField f = p.readFieldBegin();
            if (f.type == org.apache.thrift.protocol.TType.STOP) break;
            switch (f.type) {
                case org.apache.thrift.protocol.TType.STRING -> result = p.readBinary();
                case org.apache.thrift.protocol.TType.I64 -> result = p.readI64();
                case org.apache.thrift.protocol.TType.LIST -> {
                    org.apache.thrift.protocol.TList l = p.readListBegin();
                    long[] v = new long[l.size];
                    for (int i = 0; i < l.size; i++) v[i] = p.readI64();
                    p.readListEnd();
                    result = v;
                }
                default -> org.apache.thrift.protocol.TProtocolUtil.skip(p, f.type);
            }
            p.readFieldEnd();
        }
        p.readStructEnd();
        p.readMessageEnd();
        return result;
    }

    static Path blockFile(Work w, String name, int bytes) throws IOException {
        Path f = w.dir.resolve(name);
        try (OutputStream o = new BufferedOutputStream(Files.newOutputStream(f), 1 << 16)) {
            byte[] chunk = w.bytes(1 << 16);
            for (int i = 0; i < bytes; i += chunk.length) o.write(chunk);
        }
        return f;
    }

    static List<String> names(int n) {
        List<String> names = new ArrayList<>();
        for (int i = 0; i < n; i++) names.add("/blocks/part-" + i + "/rdd_" + (i * 31) + "_" + i);
        return names;
    }

    static void thrift(Work w) throws Exception {
        Path file = blockFile(w, "blocks.bin", 32 << 20);
        BlockService service = new BlockService(file, REPLY_DELAY_MS);
        BlockService meta = new BlockService(file, 1);
        org.apache.thrift.transport.TServerSocket socket = new org.apache.thrift.transport.TServerSocket(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
        int port = socket.getServerSocket().getLocalPort();
        org.apache.thrift.TMultiplexedProcessor mux = new org.apache.thrift.TMultiplexedProcessor();
        mux.registerProcessor("blocks", service);
        mux.registerProcessor("meta", meta);
        org.apache.thrift.server.TServer server = new org.apache.thrift.server.TThreadPoolServer(
            new org.apache.thrift.server.TThreadPoolServer.Args(socket).processor(mux).minWorkerThreads(2).maxWorkerThreads(8)
                .protocolFactory(new org.apache.thrift.protocol.TBinaryProtocol.Factory()));
        Thread serving = new Thread(server::serve, "thrift-server");
        serving.start();
        ExecutorService clients = Executors.newFixedThreadPool(4);
        try {
            while (!server.isServing()) pause(1);
            List<Future<?>> done = new ArrayList<>();
            for (int c = 0; c < 4; c++) {
                int client = c;
                done.add(clients.submit(() -> {
                    org.apache.thrift.transport.TSocket t = new org.apache.thrift.transport.TSocket("127.0.0.1", port, 30_000);
                    t.open();
                    try {
                        org.apache.thrift.protocol.TProtocol base = new org.apache.thrift.protocol.TBinaryProtocol(t);
                        org.apache.thrift.protocol.TProtocol blocks = new org.apache.thrift.protocol.TMultiplexedProtocol(base, "blocks");
                        org.apache.thrift.protocol.TProtocol metaP = new org.apache.thrift.protocol.TMultiplexedProtocol(base, "meta");
                        byte[] put = new byte[256 << 10];
                        new Random(client).nextBytes(put);
                        List<String> names = names(200);
                        for (int i = 0; i < 600 * w.scale; i++) {
                            sink = call(blocks, "fetch", i, (client * 7919L + i * 104_729L) % 8000, 512 << 10, null, null);
                            if (i % 3 == 0) sink = call(blocks, "put", i, 8000 + client * 100 + i % 100, 0, put, null);
                            sink = call(metaP, "meta", i, 0, 0, null, names);
                        }
                    } finally {
                        t.close();
                    }
                    return null;
                }));
            }
            for (Future<?> f : done) f.get();
        } finally {
            clients.shutdownNow();
            server.stop();
            serving.join(10_000);
            service.blocks.close();
            meta.blocks.close();
        }
    }

    static void thriftHsHa(Work w) throws Exception {
        Path file = blockFile(w, "hsha.bin", 16 << 20);
        BlockService service = new BlockService(file, REPLY_DELAY_MS);
        org.apache.thrift.transport.TNonblockingServerSocket socket = new org.apache.thrift.transport.TNonblockingServerSocket(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
        int port = socket.getPort();
        org.apache.thrift.server.THsHaServer.Args a = new org.apache.thrift.server.THsHaServer.Args(socket);
        a.processor(service).protocolFactory(new org.apache.thrift.protocol.TCompactProtocol.Factory());
        a.minWorkerThreads(2).maxWorkerThreads(2); // fewer workers than clients: requests queue
        org.apache.thrift.server.TServer server = new org.apache.thrift.server.THsHaServer(a);
        Thread serving = new Thread(server::serve, "thrift-hsha");
        serving.start();
        ExecutorService clients = Executors.newFixedThreadPool(4);
        try {
            while (!server.isServing()) pause(1);
            List<Future<?>> done = new ArrayList<>();
            for (int c = 0; c < 4; c++) {
                int client = c;
                done.add(clients.submit(() -> {
                    org.apache.thrift.transport.TTransport t = new org.apache.thrift.transport.layered.TFramedTransport(
                        new org.apache.thrift.transport.TSocket("127.0.0.1", port, 30_000), 64 << 20);
                    t.open();
                    try {
                        org.apache.thrift.protocol.TProtocol p = new org.apache.thrift.protocol.TCompactProtocol(t);
                        byte[] put = new byte[128 << 10];
                        new Random(client).nextBytes(put);
                        List<String> names = names(500);
                        for (int i = 0; i < 300 * w.scale; i++) {
                            sink = call(p, "fetch", i, (client * 31L + i * 7L) % 3000, 256 << 10, null, null);
                            if (i % 2 == 0) sink = call(p, "put", i, 3000 + client * 50 + i % 50, 0, put, null);
                            if (i % 4 == 0) sink = call(p, "meta", i, 0, 0, null, names);
                        }
                    } finally {
                        t.close();
                    }
                    return null;
                }));
            }
            for (Future<?> f : done) f.get();
        } finally {
            clients.shutdownNow();
            server.stop();
            serving.join(10_000);
            service.blocks.close();
        }
    }

    /** Records written through TCompactProtocol on a TSimpleFileTransport (RandomAccessFile), read back
     * after the file's pages are dropped from the page cache. */
    static void thriftFile(Work w) throws Exception {
        String path = w.dir.resolve("records.thrift").toString();
        List<String> names = names(20);
        for (int round = 0; round < 3 * w.scale; round++) {
            org.apache.thrift.transport.TSimpleFileTransport t = new org.apache.thrift.transport.TSimpleFileTransport(path, true, true);
            try {
                org.apache.thrift.protocol.TProtocol p = new org.apache.thrift.protocol.TCompactProtocol(t);
                byte[] payload = w.bytes(2048);
                for (int i = 0; i < 30_000; i++) {
                    p.writeStructBegin(new org.apache.thrift.protocol.TStruct("Record"));
                    p.writeFieldBegin(new org.apache.thrift.protocol.TField("id", org.apache.thrift.protocol.TType.I64, (short) 1));
                    p.writeI64(i);
                    p.writeFieldEnd();
                    p.writeFieldBegin(new org.apache.thrift.protocol.TField("name", org.apache.thrift.protocol.TType.STRING, (short) 2));
                    p.writeString(names.get(i % names.size()));
                    p.writeFieldEnd();
                    p.writeFieldBegin(new org.apache.thrift.protocol.TField("payload", org.apache.thrift.protocol.TType.STRING, (short) 3));
                    p.writeBinary(ByteBuffer.wrap(payload, 0, 256 + i % 1500));
                    p.writeFieldEnd();
                    p.writeFieldStop();
                    p.writeStructEnd();
                }
                t.flush();
            } finally {
                t.close();
            }
            evict(Path.of(path));
            org.apache.thrift.transport.TSimpleFileTransport r = new org.apache.thrift.transport.TSimpleFileTransport(path, true, false);
            try {
                org.apache.thrift.protocol.TProtocol p = new org.apache.thrift.protocol.TCompactProtocol(r);
                for (int i = 0; i < 30_000; i++) {
                    p.readStructBegin();
                    while (true) {
                        org.apache.thrift.protocol.TField f = p.readFieldBegin();
                        if (f.type == org.apache.thrift.protocol.TType.STOP) break;
                        org.apache.thrift.protocol.TProtocolUtil.skip(p, f.type);
                        p.readFieldEnd();
                    }
                    p.readStructEnd();
                }
            } finally {
                r.close();
            }
        }
    }

    // ---------------------------------------------------------------------------------------------
    // ZooKeeper: an in-process server and clients

    static void zookeeper(Work w) throws Exception {
        System.setProperty("zookeeper.snapCount", "2000");
        System.setProperty("zookeeper.admin.enableServer", "false");
        System.setProperty("zookeeper.jmx.log4j.disable", "true");
        File snaps = Files.createDirectories(w.dir.resolve("zk-snap")).toFile();
        File logs = Files.createDirectories(w.dir.resolve("zk-log")).toFile();
        for (int run = 0; run < 2; run++) { // the second run restores from the snapshots and the log first
            org.apache.zookeeper.server.ZooKeeperServer zks = new org.apache.zookeeper.server.ZooKeeperServer(snaps, logs, 200);
            org.apache.zookeeper.server.ServerCnxnFactory factory = org.apache.zookeeper.server.ServerCnxnFactory.createFactory(
                new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 100);
            factory.startup(zks);
            String connect = "127.0.0.1:" + factory.getLocalPort();
            ExecutorService clients = Executors.newFixedThreadPool(4);
            try {
                int r = run;
                List<Future<?>> done = new ArrayList<>();
                for (int c = 0; c < 3; c++) {
                    int client = c;
                    done.add(clients.submit(() -> { zkClient(w, connect, r, client); return null; }));
                }
                done.add(clients.submit(() -> { zkWatcher(w, connect, r); return null; }));
                for (Future<?> f : done) f.get();
                zks.takeSnapshot();
            } finally {
                clients.shutdownNow();
                factory.shutdown();
                zks.shutdown();
            }
        }
    }

    static org.apache.zookeeper.ZooKeeper connect(String where, org.apache.zookeeper.Watcher also) throws Exception {
        CountDownLatch connected = new CountDownLatch(1);
        org.apache.zookeeper.ZooKeeper zk = new org.apache.zookeeper.ZooKeeper(where, 30_000, e -> {
            if (e.getState() == org.apache.zookeeper.Watcher.Event.KeeperState.SyncConnected) connected.countDown();
            if (also != null) also.process(e);
        });
        if (!connected.await(30, TimeUnit.SECONDS)) throw new IOException("zookeeper: no session");
        return zk;
    }

    static void zkClient(Work w, String where, int run, int client) throws Exception {
        org.apache.zookeeper.ZooKeeper zk = connect(where, null);
        List<org.apache.zookeeper.data.ACL> open = org.apache.zookeeper.ZooDefs.Ids.OPEN_ACL_UNSAFE;
        try {
            String root = "/app" + run + "-" + client;
            zk.create(root, new byte[0], open, org.apache.zookeeper.CreateMode.PERSISTENT);
            byte[] small = new byte[512];
            byte[] big = new byte[200 << 10];
            new Random(client).nextBytes(big);
            int n = 400 * w.scale;
            for (int i = 0; i < n; i++) {
                String path = zk.create(root + "/task-", small, open, org.apache.zookeeper.CreateMode.PERSISTENT_SEQUENTIAL);
                zk.setData(path, (i % 10 == 0) ? big : small, -1);
                sink = zk.getData(path, false, new org.apache.zookeeper.data.Stat());
                sink = zk.exists(root + "/task-" + String.format("%010d", i / 2), false);
                if (i % 20 == 0) sink = zk.getChildren(root, false);
            }
            // Multi-ops: a create, a version-checked update and a delete, atomically.
            for (int i = 0; i < n / 4; i++) {
                String p = root + "/multi-" + i;
                sink = zk.multi(List.of(
                    org.apache.zookeeper.Op.create(p, small, open, org.apache.zookeeper.CreateMode.PERSISTENT),
                    org.apache.zookeeper.Op.setData(p, big, 0),
                    org.apache.zookeeper.Op.check(root, -1)));
            }
            // Asynchronous creates with callbacks, awaited together; ephemeral nodes leave with the session.
            CountDownLatch acks = new CountDownLatch(n);
            for (int i = 0; i < n; i++) {
                zk.create(root + "/e-" + i, small, open, org.apache.zookeeper.CreateMode.EPHEMERAL, (rc, p, ctx, name) -> acks.countDown(), null);
            }
            if (!acks.await(120, TimeUnit.SECONDS)) throw new IOException("zookeeper: async creates stalled");
            for (String child : zk.getChildren(root, false)) if (child.startsWith("task-")) zk.delete(root + "/" + child, -1);
        } finally {
            zk.close();
        }
    }

    /** A configuration node updated by one session and followed through watches by another. */
    static void zkWatcher(Work w, String where, int run) throws Exception {
        String node = "/config" + run;
        org.apache.zookeeper.ZooKeeper writer = connect(where, null);
        BlockingQueue<org.apache.zookeeper.WatchedEvent> events = new LinkedBlockingQueue<>();
        org.apache.zookeeper.ZooKeeper reader = connect(where, null);
        try {
            writer.create(node, new byte[16], org.apache.zookeeper.ZooDefs.Ids.OPEN_ACL_UNSAFE, org.apache.zookeeper.CreateMode.PERSISTENT);
            org.apache.zookeeper.Watcher watch = events::add;
            byte[] config = new byte[8 << 10];
            for (int i = 0; i < 300 * w.scale; i++) {
                sink = reader.getData(node, watch, null);
                config[i % config.length] ^= 1;
                writer.setData(node, config, -1);
                if (events.poll(30, TimeUnit.SECONDS) == null) throw new IOException("zookeeper: no watch event");
            }
        } finally {
            writer.close();
            reader.close();
        }
    }

    // ---------------------------------------------------------------------------------------------
    // LMAX Disruptor

    static final class Entry {
        long id;
        byte[] payload;
    }

    static void disruptor(Work w) throws Exception {
        byte[][] payloads = new byte[16][];
        for (int i = 0; i < payloads.length; i++) payloads[i] = w.bytes(8192);
        // A slow peer for the replicator: reads 64 KiB, then a millisecond's pause.
        ServerSocket ss = new ServerSocket(0, 4, InetAddress.getLoopbackAddress());
        Thread peer = new Thread(() -> {
            try (Socket s = ss.accept()) {
                s.setReceiveBufferSize(64 << 10);
                InputStream in = s.getInputStream();
                byte[] buf = new byte[64 << 10];
                while (in.read(buf) > 0) pause(1);
            } catch (IOException e) {
                // closed
            }
        });
        peer.setDaemon(true);
        peer.start();
        Socket replica = new Socket(InetAddress.getLoopbackAddress(), ss.getLocalPort());
        replica.setSendBufferSize(64 << 10);
        OutputStream toReplica = new BufferedOutputStream(replica.getOutputStream(), 32 << 10);
        try (FileChannel journal = FileChannel.open(w.dir.resolve("journal.bin"), StandardOpenOption.CREATE, StandardOpenOption.WRITE)) {
            // 1. Producers outrun a journaller (forces every 32 entries) and a replicator: they wait for slots.
            com.lmax.disruptor.dsl.Disruptor<Entry> d = new com.lmax.disruptor.dsl.Disruptor<>(Entry::new, 256,
                com.lmax.disruptor.util.DaemonThreadFactory.INSTANCE, com.lmax.disruptor.dsl.ProducerType.MULTI,
                new com.lmax.disruptor.BlockingWaitStrategy());
            AtomicLong journalled = new AtomicLong();
            d.handleEventsWith((Entry e, long seq, boolean end) -> {
                journal.write(ByteBuffer.wrap(e.payload));
                if (journalled.incrementAndGet() % 32 == 0 || end) journal.force(false);
            }, (Entry e, long seq, boolean end) -> {
                toReplica.write(e.payload);
                if (end) toReplica.flush();
            }).then((Entry e, long seq, boolean end) -> e.payload = null);
            com.lmax.disruptor.RingBuffer<Entry> ring = d.start();
            int perProducer = 6000 * w.scale;
            Thread[] producers = new Thread[3];
            for (int p = 0; p < producers.length; p++) {
                int base = p;
                producers[p] = new Thread(() -> {
                    for (int i = 0; i < perProducer; i++) {
                        long id = base * 1_000_000L + i;
                        ring.publishEvent((e, seq, x) -> { e.id = x; e.payload = payloads[(int) (x % payloads.length)]; }, id);
                    }
                });
                producers[p].start();
            }
            for (Thread t : producers) t.join();
            d.shutdown(60, TimeUnit.SECONDS);

            // 2. Consumers outrun paced producers: they wait on the strategies (blocking, lite, timeout), and a
            // worker pool shares the events.
            com.lmax.disruptor.WaitStrategy[] strategies = {
                new com.lmax.disruptor.BlockingWaitStrategy(), new com.lmax.disruptor.LiteBlockingWaitStrategy(),
                new com.lmax.disruptor.TimeoutBlockingWaitStrategy(5, TimeUnit.MILLISECONDS)};
            for (com.lmax.disruptor.WaitStrategy strategy : strategies) {
                com.lmax.disruptor.dsl.Disruptor<Entry> slow = new com.lmax.disruptor.dsl.Disruptor<>(Entry::new, 1024,
                    com.lmax.disruptor.util.DaemonThreadFactory.INSTANCE, com.lmax.disruptor.dsl.ProducerType.SINGLE, strategy);
                AtomicLong seen = new AtomicLong();
                slow.handleEventsWith((Entry e, long seq, boolean end) -> seen.addAndGet(e.payload.length));
                slow.handleEventsWithWorkerPool(e -> seen.incrementAndGet(), e -> seen.incrementAndGet());
                com.lmax.disruptor.RingBuffer<Entry> r = slow.start();
                for (int i = 0; i < 1500 * w.scale; i++) {
                    r.publishEvent((e, seq, x) -> { e.id = x; e.payload = payloads[(int) (x % payloads.length)]; }, (long) i);
                    if (i % 2 == 0) pause(1);
                }
                slow.shutdown(60, TimeUnit.SECONDS);
            }
        } catch (com.lmax.disruptor.TimeoutException e) {
            throw new IOException("disruptor did not drain", e);
        } finally {
            replica.close();
            ss.close();
        }
    }
}
