package cpwork;

import static cpwork.Work.evict;
import static cpwork.Work.pause;

import java.io.*;
import java.net.*;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;

/** More remote-call, cache, group and wire-format libraries from Debian: Hessian RPC over HTTP against a
 * {@code com.sun.net.httpserver} server whose handler answers a few ms late, spymemcached against a
 * memcached started by the driver on a loopback port (shared by more threads than it has connections),
 * JGroups 2 (two channels in one JVM over the TCP stack on loopback: multicasts, unicasts, a state
 * transfer), Apache Commons VFS on local files (and zip/tar archives through it, read back cold), and
 * protobuf dynamic messages (no generated code) to files and over a socket to a slow reader. */
public final class LibWire {
    static volatile Object sink;
    static final int REPLY_DELAY_MS = 2;

    public static void main(String[] args) throws Exception {
        Work w = new Work(args);
        w.phase("hessian", () -> hessian(w));
        w.phase("memcached", () -> memcached(w));
        w.phase("jgroups", () -> jgroups(w));
        w.phase("vfs", () -> vfs(w));
        w.phase("protobuf", () -> protobuf(w));
    }

    // ---------------------------------------------------------------------------------------------
    // Hessian

    public interface BlockApi {
        byte[] fetch(long block, int length);

        long put(String name, byte[] data);

        Map<String, Object> meta(List<String> names);

        List<Stat> stats(int count);
    }

    public static final class Stat implements Serializable {
        public String host;
        public long records;
        public double[] timings;
        public Map<String, Long> counters;

        public Stat() { }
    }

    public static final class BlockServer implements BlockApi {
        final byte[] data;

        BlockServer(byte[] data) { this.data = data; }

        @Override public byte[] fetch(long block, int length) {
            int from = (int) (block * 4096 % (data.length - length));
            return Arrays.copyOfRange(data, from, from + length);
        }

        @Override public long put(String name, byte[] bytes) { return bytes.length + name.length(); }

        @Override public Map<String, Object> meta(List<String> names) {
            Map<String, Object> m = new HashMap<>();
            for (String n : names) m.put(n, new ArrayList<>(Arrays.asList(n.length(), (long) n.hashCode(), n.toUpperCase(Locale.ROOT))));
            return m;
        }

        @Override public List<Stat> stats(int count) {
            List<Stat> out = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                Stat s = new Stat();
                s.host = "executor-" + i;
                s.records = i * 1000L;
                s.timings = new double[] {i, i * 0.5, i * 0.25};
                s.counters = new HashMap<>();
                s.counters.put("read", (long) i);
                s.counters.put("written", i * 2L);
                out.add(s);
            }
            return out;
        }
    }

    static void hessian(Work w) throws Exception {
        com.caucho.hessian.server.HessianSkeleton skeleton = new com.caucho.hessian.server.HessianSkeleton(new BlockServer(w.bytes(8 << 20)), BlockApi.class);
        com.sun.net.httpserver.HttpServer server = com.sun.net.httpserver.HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 50);
        server.createContext("/blocks", exchange -> {
            try (exchange) {
                ByteArrayOutputStream reply = new ByteArrayOutputStream();
                try (InputStream in = exchange.getRequestBody()) {
                    skeleton.invoke(in, reply);
                } catch (Exception e) {
                    throw new IOException(e);
                }
                pause(REPLY_DELAY_MS);
                exchange.getResponseHeaders().add("Content-Type", "x-application/hessian");
                exchange.sendResponseHeaders(200, reply.size());
                try (OutputStream out = exchange.getResponseBody()) { reply.writeTo(out); }
            }
        });
        server.setExecutor(Executors.newFixedThreadPool(2)); // fewer server threads than clients
        server.start();
        ExecutorService clients = Executors.newFixedThreadPool(4);
        try {
            String url = "http://127.0.0.1:" + server.getAddress().getPort() + "/blocks";
            List<Future<?>> done = new ArrayList<>();
            for (int c = 0; c < 4; c++) {
                int client = c;
                done.add(clients.submit(() -> {
                    com.caucho.hessian.client.HessianProxyFactory factory = new com.caucho.hessian.client.HessianProxyFactory();
                    factory.setHessian2Request(true);
                    factory.setHessian2Reply(true);
                    factory.setReadTimeout(60_000);
                    BlockApi api = (BlockApi) factory.create(BlockApi.class, url, LibWire.class.getClassLoader());
                    byte[] up = new byte[96 << 10];
                    new Random(client).nextBytes(up);
                    List<String> names = new ArrayList<>();
                    for (int i = 0; i < 100; i++) names.add("/shuffle/" + client + "/part-" + i);
                    for (int i = 0; i < 150 * w.scale; i++) {
                        sink = api.fetch(client * 1000L + i, 256 << 10);
                        if (i % 2 == 0) sink = api.put("block-" + i, up);
                        if (i % 5 == 0) sink = api.meta(names);
                        if (i % 5 == 1) sink = api.stats(50);
                    }
                    return null;
                }));
            }
            for (Future<?> f : done) f.get();
        } finally {
            clients.shutdownNow();
            server.stop(0);
            ((ExecutorService) server.getExecutor()).shutdownNow();
        }
    }

    // ---------------------------------------------------------------------------------------------
    // spymemcached against a local memcached

    static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) { return s.getLocalPort(); }
    }

    static void memcached(Work w) throws Exception {
        int port = freePort();
        List<String> command = new ArrayList<>(List.of("memcached", "-l", "127.0.0.1", "-p", String.valueOf(port), "-U", "0", "-m", "256", "-t", "2", "-I", "2m"));
        if ("root".equals(System.getProperty("user.name"))) command.addAll(List.of("-u", "root"));
        Process daemon = new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(w.dir.resolve("memcached.log").toFile()).start();
        net.spy.memcached.MemcachedClient client = null;
        try {
            long deadline = System.nanoTime() + 10_000_000_000L;
            while (true) {
                try (Socket probe = new Socket(InetAddress.getLoopbackAddress(), port)) { break; }
                catch (IOException e) {
                    if (System.nanoTime() > deadline || !daemon.isAlive()) throw new IOException("memcached did not start", e);
                    pause(20);
                }
            }
            client = new net.spy.memcached.MemcachedClient(new net.spy.memcached.ConnectionFactoryBuilder()
                .setOpTimeout(30_000).setProtocol(net.spy.memcached.ConnectionFactoryBuilder.Protocol.BINARY).build(),
                List.of(new InetSocketAddress("127.0.0.1", port)));
            net.spy.memcached.MemcachedClient c = client;
            byte[] big = w.bytes(512 << 10);
            byte[] small = w.bytes(2048);
            ExecutorService threads = Executors.newFixedThreadPool(4);
            try {
                List<Future<?>> done = new ArrayList<>();
                for (int t = 0; t < 4; t++) {
                    int base = t;
                    done.add(threads.submit(() -> {
                        for (int i = 0; i < 600 * w.scale; i++) {
                            String key = "k" + base + "-" + (i % 200);
                            c.set(key, 0, i % 10 == 0 ? big : small).get();
                            sink = c.get(key);
                            if (i % 7 == 0) sink = c.asyncGet("k" + ((base + 1) % 4) + "-" + (i % 200)).get(30, TimeUnit.SECONDS);
                            if (i % 20 == 0) {
                                List<String> keys = new ArrayList<>();
                                for (int k = 0; k < 50; k++) keys.add("k" + base + "-" + k);
                                sink = c.getBulk(keys);
                            }
                            sink = c.incr("counter-" + base, 1, 0);
                            if (i % 11 == 0) c.delete("k" + base + "-" + ((i + 100) % 200)).get();
                        }
                        return null;
                    }));
                }
                for (Future<?> f : done) f.get();
            } finally {
                threads.shutdownNow();
            }
        } finally {
            if (client != null) client.shutdown(5, TimeUnit.SECONDS);
            daemon.destroy();
            if (!daemon.waitFor(5, TimeUnit.SECONDS)) daemon.destroyForcibly();
        }
    }

    // ---------------------------------------------------------------------------------------------
    // JGroups: two members in one JVM

    static final class Member extends org.jgroups.ReceiverAdapter {
        final AtomicLong bytes = new AtomicLong();
        final AtomicInteger messages = new AtomicInteger();
        volatile byte[] state = new byte[0];

        @Override public void receive(org.jgroups.Message m) {
            bytes.addAndGet(m.getLength());
            messages.incrementAndGet();
        }

        @Override public byte[] getState() { return state; }

        @Override public void setState(byte[] s) { state = s; }
    }

    static void jgroups(Work w) throws Exception {
        System.setProperty("java.net.preferIPv4Stack", "true");
        System.setProperty("jgroups.bind_addr", "127.0.0.1");
        int a = freePort(), b = freePort();
        String stack = "TCP(bind_addr=127.0.0.1;bind_port=" + a + ";port_range=0;loopback=true;enable_bundling=true;max_bundle_size=64000;"
            + "use_send_queues=true;sock_conn_timeout=300;thread_pool.min_threads=1;thread_pool.max_threads=4;oob_thread_pool.max_threads=4):"
            + "TCPPING(timeout=2000;initial_hosts=127.0.0.1[" + a + "],127.0.0.1[" + b + "];port_range=0;num_initial_members=2):"
            + "MERGE2(min_interval=10000;max_interval=30000):FD_SOCK:VERIFY_SUSPECT(timeout=1500):BARRIER:"
            + "pbcast.NAKACK(use_mcast_xmit=false;gc_lag=0;retransmit_timeout=300,600,1200;discard_delivered_msgs=true):"
            + "UNICAST(timeout=300,600,1200):pbcast.STABLE(stability_delay=1000;desired_avg_gossip=50000;max_bytes=4000000):"
            + "pbcast.GMS(print_local_addr=false;join_timeout=3000;view_bundling=true):"
            + "UFC(max_credits=500000;min_threshold=0.4):MFC(max_credits=500000;min_threshold=0.4):FRAG2(frag_size=60000):pbcast.STATE_TRANSFER";
        org.jgroups.JChannel first = new org.jgroups.JChannel(stack);
        org.jgroups.JChannel second = new org.jgroups.JChannel(stack.replace("bind_port=" + a, "bind_port=" + b));
        Member one = new Member(), two = new Member();
        first.setReceiver(one);
        second.setReceiver(two);
        try {
            one.state = w.bytes(4 << 20);
            first.connect("cp-cluster");
            second.connect("cp-cluster");
            long deadline = System.nanoTime() + 30_000_000_000L;
            while (second.getView().size() < 2 && System.nanoTime() < deadline) pause(20);
            if (second.getView().size() < 2) throw new IOException("jgroups: no two-member view");
            if (!second.getState(null, 30_000)) throw new IOException("jgroups: no state");
            byte[] payload = w.bytes(32 << 10);
            int n = 4000 * w.scale;
            org.jgroups.Address to = second.getAddress();
            for (int i = 0; i < n; i++) {
                first.send(new org.jgroups.Message(null, null, payload)); // to the group (both members)
                if (i % 4 == 0) first.send(new org.jgroups.Message(to, null, payload)); // unicast
            }
            deadline = System.nanoTime() + 120_000_000_000L;
            while (two.messages.get() < n + n / 4 && System.nanoTime() < deadline) pause(10);
            if (two.messages.get() < n + n / 4) throw new IOException("jgroups: lost messages " + two.messages.get());
        } finally {
            second.close();
            first.close();
        }
    }

    // ---------------------------------------------------------------------------------------------
    // Commons VFS on local files

    static void vfs(Work w) throws Exception {
        org.apache.commons.vfs2.FileSystemManager fs = org.apache.commons.vfs2.VFS.getManager();
        Path root = Files.createDirectories(w.dir.resolve("vfs"));
        org.apache.commons.vfs2.FileObject dir = fs.resolveFile(root.toUri().toString());
        byte[] chunk = w.text(64 << 10);
        for (int i = 0; i < 40 * w.scale; i++) {
            org.apache.commons.vfs2.FileObject f = dir.resolveFile("part-" + i + "/data.bin");
            f.createFile();
            try (OutputStream out = f.getContent().getOutputStream()) {
                for (int k = 0; k < 32; k++) out.write(chunk);
            }
        }
        // A zip of some parts, written with java.util.zip, read through VFS's zip provider.
        Path zip = root.resolve("parts.zip");
        try (java.util.zip.ZipOutputStream z = new java.util.zip.ZipOutputStream(Files.newOutputStream(zip))) {
            z.setLevel(1);
            for (int i = 0; i < 10; i++) {
                z.putNextEntry(new java.util.zip.ZipEntry("p" + i + ".bin"));
                for (int k = 0; k < 16; k++) z.write(chunk);
                z.closeEntry();
            }
        }
        evict(root);
        byte[] buf = new byte[32 << 10];
        for (org.apache.commons.vfs2.FileObject part : dir.getChildren()) {
            if (part.getType() != org.apache.commons.vfs2.FileType.FOLDER) continue;
            org.apache.commons.vfs2.FileObject f = part.resolveFile("data.bin");
            sink = f.getContent().getSize();
            sink = f.getContent().getLastModifiedTime();
            try (InputStream in = f.getContent().getInputStream()) { while (in.read(buf) > 0) { } }
        }
        org.apache.commons.vfs2.FileObject copies = dir.resolveFile("copies");
        copies.createFolder();
        for (int i = 1; i < 40 * w.scale; i += 4) copies.resolveFile("part-" + i).copyFrom(dir.resolveFile("part-" + i), org.apache.commons.vfs2.Selectors.SELECT_ALL);
        org.apache.commons.vfs2.FileObject archive = fs.resolveFile("zip:" + zip.toUri());
        for (org.apache.commons.vfs2.FileObject entry : archive.getChildren()) {
            try (InputStream in = entry.getContent().getInputStream()) { while (in.read(buf) > 0) { } }
        }
        archive.close();
        sink = dir.findFiles(org.apache.commons.vfs2.Selectors.SELECT_FILES).length;
        evict(root);
        dir.resolveFile("copies").deleteAll();
        for (int i = 0; i < 40 * w.scale; i += 2) dir.resolveFile("part-" + i).deleteAll();
        fs.closeFileSystem(dir.getFileSystem());
    }

    // ---------------------------------------------------------------------------------------------
    // protobuf dynamic messages

    static com.google.protobuf.Descriptors.Descriptor blockType() throws Exception {
        com.google.protobuf.DescriptorProtos.DescriptorProto.Builder m = com.google.protobuf.DescriptorProtos.DescriptorProto.newBuilder().setName("Block");
        String[][] fields = {{"id", "TYPE_INT64"}, {"host", "TYPE_STRING"}, {"payload", "TYPE_BYTES"}, {"score", "TYPE_DOUBLE"}, {"tags", "TYPE_STRING"}};
        for (int i = 0; i < fields.length; i++) {
            m.addField(com.google.protobuf.DescriptorProtos.FieldDescriptorProto.newBuilder().setName(fields[i][0]).setNumber(i + 1)
                .setType(com.google.protobuf.DescriptorProtos.FieldDescriptorProto.Type.valueOf(fields[i][1]))
                .setLabel(fields[i][0].equals("tags") ? com.google.protobuf.DescriptorProtos.FieldDescriptorProto.Label.LABEL_REPEATED
                    : com.google.protobuf.DescriptorProtos.FieldDescriptorProto.Label.LABEL_OPTIONAL));
        }
        com.google.protobuf.DescriptorProtos.FileDescriptorProto file = com.google.protobuf.DescriptorProtos.FileDescriptorProto.newBuilder()
            .setName("cp.proto").setPackage("cp").addMessageType(m).build();
        return com.google.protobuf.Descriptors.FileDescriptor.buildFrom(file, new com.google.protobuf.Descriptors.FileDescriptor[0]).findMessageTypeByName("Block");
    }

    static com.google.protobuf.DynamicMessage block(com.google.protobuf.Descriptors.Descriptor d, long i, byte[] payload) {
        com.google.protobuf.DynamicMessage.Builder b = com.google.protobuf.DynamicMessage.newBuilder(d)
            .setField(d.findFieldByName("id"), i)
            .setField(d.findFieldByName("host"), "executor-" + (i % 32))
            .setField(d.findFieldByName("payload"), com.google.protobuf.ByteString.copyFrom(payload, 0, 256 + (int) (i % 2000)))
            .setField(d.findFieldByName("score"), i * 0.5);
        for (int t = 0; t < 3; t++) b.addRepeatedField(d.findFieldByName("tags"), "tag-" + (i + t) % 17);
        return b.build();
    }

    static void protobuf(Work w) throws Exception {
        com.google.protobuf.Descriptors.Descriptor d = blockType();
        byte[] payload = w.bytes(4096);
        int n = 60_000 * w.scale;
        Path file = w.dir.resolve("blocks.pb");
        try (OutputStream out = new BufferedOutputStream(Files.newOutputStream(file), 1 << 16)) {
            for (int i = 0; i < n; i++) block(d, i, payload).writeDelimitedTo(out);
        }
        evict(file);
        try (InputStream in = new BufferedInputStream(Files.newInputStream(file), 1 << 16)) {
            for (int i = 0; i < n; i++) {
                com.google.protobuf.DynamicMessage.Builder b = com.google.protobuf.DynamicMessage.newBuilder(d);
                if (!b.mergeDelimitedFrom(in)) throw new IOException("protobuf: short file");
                sink = b.build();
            }
        }
        // Over a socket to a reader that pauses every 50 messages: the writer's CodedOutputStream waits to send.
        try (ServerSocket ss = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            Future<Integer> reader = Executors.newSingleThreadExecutor(r -> { Thread t = new Thread(r); t.setDaemon(true); return t; }).submit(() -> {
                int count = 0;
                try (Socket s = ss.accept()) {
                    s.setReceiveBufferSize(64 << 10);
                    com.google.protobuf.CodedInputStream in = com.google.protobuf.CodedInputStream.newInstance(s.getInputStream(), 8192);
                    while (!in.isAtEnd()) {
                        int length = in.readRawVarint32();
                        int limit = in.pushLimit(length);
                        com.google.protobuf.DynamicMessage.Builder b = com.google.protobuf.DynamicMessage.newBuilder(d);
                        b.mergeFrom(in);
                        in.popLimit(limit);
                        sink = b.build();
                        if (++count % 50 == 0) pause(1);
                    }
                }
                return count;
            });
            try (Socket s = new Socket(InetAddress.getLoopbackAddress(), ss.getLocalPort())) {
                s.setSendBufferSize(64 << 10);
                com.google.protobuf.CodedOutputStream out = com.google.protobuf.CodedOutputStream.newInstance(s.getOutputStream(), 8192);
                for (int i = 0; i < n / 2; i++) {
                    com.google.protobuf.DynamicMessage m = block(d, i, payload);
                    out.writeUInt32NoTag(m.getSerializedSize());
                    m.writeTo(out);
                }
                out.flush();
            }
            if (reader.get(120, TimeUnit.SECONDS) != n / 2) throw new IOException("protobuf: lost messages");
        }
    }
}
