package cpwork;

import com.sun.net.httpserver.HttpServer;
import java.io.*;
import java.net.*;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.channels.*;
import java.security.KeyStore;
import java.util.Iterator;
import java.util.concurrent.*;
import javax.net.ssl.*;

/**
 * Real sockets between threads of this JVM: TCP streams and channels, a selector loop, UDP, the JDK
 * HTTP server with HttpURLConnection and java.net.http, and TLS. Servers answer after a short think
 * time, standing in for a remote peer, so clients really wait on the network.
 */
public final class JdkNet {
    static final byte[] CHUNK = new byte[64 * 1024];

    static void echoServer(ServerSocket ss, int delayMs) {
        Thread t = new Thread(() -> {
            while (!ss.isClosed()) {
                try (Socket s = ss.accept()) {
                    InputStream in = s.getInputStream();
                    OutputStream out = s.getOutputStream();
                    byte[] buf = new byte[65536];
                    DataInputStream din = new DataInputStream(in);
                    while (true) {
                        int n;
                        try { n = din.readInt(); } catch (EOFException e) { break; }
                        din.readFully(buf, 0, Math.min(n, buf.length));
                        if (delayMs > 0) Thread.sleep(delayMs);
                        out.write(buf, 0, Math.min(n, buf.length));
                        out.flush();
                    }
                } catch (Exception e) {
                    if (!ss.isClosed()) System.out.println("server: " + e);
                }
            }
        }, "echo-server");
        t.setDaemon(true);
        t.start();
    }

    public static void main(String[] args) throws Exception {
        Work w = new Work(args);
        int rounds = 300 * w.scale;
        w.phase("socket", () -> {
            try (ServerSocket ss = new ServerSocket(0, 50, InetAddress.getLoopbackAddress())) {
                echoServer(ss, 2);
                for (int c = 0; c < 3; c++) {
                    try (Socket s = new Socket(InetAddress.getLoopbackAddress(), ss.getLocalPort())) {
                        s.setTcpNoDelay(true);
                        DataOutputStream out = new DataOutputStream(new BufferedOutputStream(s.getOutputStream()));
                        DataInputStream in = new DataInputStream(new BufferedInputStream(s.getInputStream()));
                        byte[] back = new byte[CHUNK.length];
                        for (int i = 0; i < rounds / 3; i++) {
                            int n = 1024 + (i * 997) % (CHUNK.length - 1024);
                            out.writeInt(n); out.write(CHUNK, 0, n); out.flush();
                            in.readFully(back, 0, n);
                        }
                    }
                }
            }
        });
        w.phase("socket-bulk", () -> {
            try (ServerSocket ss = new ServerSocket(0, 50, InetAddress.getLoopbackAddress())) {
                Thread sink = new Thread(() -> {
                    try (Socket s = ss.accept()) { s.getInputStream().transferTo(OutputStream.nullOutputStream()); } catch (IOException e) { System.out.println(e); }
                });
                sink.start();
                try (Socket s = new Socket(InetAddress.getLoopbackAddress(), ss.getLocalPort())) {
                    s.setSendBufferSize(16 * 1024);
                    OutputStream out = s.getOutputStream();
                    for (int i = 0; i < 2000 * w.scale; i++) out.write(CHUNK);
                }
                sink.join();
            }
        });
        w.phase("channels", () -> {
            try (ServerSocketChannel server = ServerSocketChannel.open()) {
                server.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
                Thread t = new Thread(() -> {
                    try (SocketChannel ch = server.accept()) {
                        ByteBuffer buf = ByteBuffer.allocateDirect(65536);
                        while (ch.read(buf) >= 0) { buf.flip(); Thread.sleep(1); while (buf.hasRemaining()) ch.write(buf); buf.clear(); }
                    } catch (Exception e) { System.out.println(e); }
                });
                t.start();
                try (SocketChannel ch = SocketChannel.open(server.getLocalAddress())) {
                    ByteBuffer out = ByteBuffer.allocateDirect(32 * 1024);
                    ByteBuffer in = ByteBuffer.allocateDirect(32 * 1024);
                    for (int i = 0; i < rounds; i++) {
                        out.clear(); while (out.hasRemaining()) ch.write(out);
                        in.clear(); while (in.hasRemaining()) ch.read(in);
                    }
                    ch.shutdownOutput();
                }
                t.join();
            }
        });
        w.phase("selector", () -> {
            try (Selector sel = Selector.open(); ServerSocketChannel server = ServerSocketChannel.open()) {
                server.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
                server.configureBlocking(false);
                server.register(sel, SelectionKey.OP_ACCEPT);
                int clients = 4;
                ExecutorService pool = Executors.newFixedThreadPool(clients);
                for (int c = 0; c < clients; c++) {
                    pool.submit(() -> {
                        try (Socket s = new Socket(InetAddress.getLoopbackAddress(), server.socket().getLocalPort())) {
                            byte[] b = new byte[4096];
                            for (int i = 0; i < rounds / 2; i++) { s.getOutputStream().write(b); s.getInputStream().readNBytes(b, 0, b.length); Thread.sleep(1); }
                        }
                        return null;
                    });
                }
                pool.shutdown();
                int closed = 0;
                ByteBuffer buf = ByteBuffer.allocate(65536);
                while (closed < clients) {
                    sel.select(1000);
                    Iterator<SelectionKey> it = sel.selectedKeys().iterator();
                    while (it.hasNext()) {
                        SelectionKey k = it.next(); it.remove();
                        if (k.isAcceptable()) { SocketChannel ch = server.accept(); ch.configureBlocking(false); ch.register(sel, SelectionKey.OP_READ); }
                        else if (k.isReadable()) {
                            SocketChannel ch = (SocketChannel) k.channel();
                            buf.clear();
                            int n = ch.read(buf);
                            if (n < 0) { ch.close(); closed++; } else { buf.flip(); while (buf.hasRemaining()) ch.write(buf); }
                        }
                    }
                }
                pool.awaitTermination(60, TimeUnit.SECONDS);
            }
        });
        w.phase("udp", () -> {
            try (DatagramSocket server = new DatagramSocket(0, InetAddress.getLoopbackAddress());
                 DatagramSocket client = new DatagramSocket()) {
                Thread t = new Thread(() -> {
                    byte[] b = new byte[1500];
                    DatagramPacket p = new DatagramPacket(b, b.length);
                    try { server.setSoTimeout(2000); while (true) { server.receive(p); Thread.sleep(1); server.send(new DatagramPacket(b, p.getLength(), p.getSocketAddress())); } } catch (Exception e) { }
                });
                t.start();
                client.setSoTimeout(2000);
                byte[] b = new byte[1200];
                DatagramPacket back = new DatagramPacket(new byte[1500], 1500);
                for (int i = 0; i < rounds; i++) { client.send(new DatagramPacket(b, b.length, server.getLocalSocketAddress())); client.receive(back); }
                try (DatagramChannel ch = DatagramChannel.open()) {
                    ch.connect(server.getLocalSocketAddress());
                    ByteBuffer out = ByteBuffer.allocate(1200), in = ByteBuffer.allocate(1500);
                    for (int i = 0; i < rounds; i++) { out.clear(); ch.write(out); in.clear(); ch.read(in); }
                }
                t.join();
            }
        });
        w.phase("http", () -> {
            HttpServer server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 50);
            byte[] body = w.text(200_000);
            server.createContext("/data", ex -> {
                ex.getRequestBody().readAllBytes();
                try { Thread.sleep(3); } catch (InterruptedException e) { }
                ex.sendResponseHeaders(200, body.length);
                try (OutputStream o = ex.getResponseBody()) { o.write(body); }
            });
            server.setExecutor(Executors.newFixedThreadPool(4));
            server.start();
            String url = "http://127.0.0.1:" + server.getAddress().getPort() + "/data";
            try {
                for (int i = 0; i < rounds / 3; i++) {
                    HttpURLConnection c = (HttpURLConnection) new URL(url).openConnection();
                    if (i % 2 == 0) { c.setDoOutput(true); c.setRequestMethod("POST"); try (OutputStream o = c.getOutputStream()) { o.write(body, 0, 50_000); } }
                    try (InputStream in = c.getInputStream()) { in.readAllBytes(); }
                }
                HttpClient client = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();
                for (int i = 0; i < rounds / 3; i++) {
                    HttpRequest req = i % 2 == 0 ? HttpRequest.newBuilder(URI.create(url)).GET().build()
                            : HttpRequest.newBuilder(URI.create(url)).POST(HttpRequest.BodyPublishers.ofByteArray(body)).build();
                    client.send(req, HttpResponse.BodyHandlers.ofByteArray());
                }
                java.util.List<CompletableFuture<HttpResponse<String>>> fs = new java.util.ArrayList<>();
                for (int i = 0; i < rounds / 3; i++) fs.add(client.sendAsync(HttpRequest.newBuilder(URI.create(url)).build(), HttpResponse.BodyHandlers.ofString()));
                for (CompletableFuture<HttpResponse<String>> f : fs) f.get();
                try (InputStream in = new URL(url).openStream()) { in.readAllBytes(); }
            } finally {
                server.stop(0);
                ((ExecutorService) server.getExecutor()).shutdownNow();
            }
        });
        w.phase("tls", () -> {
            String store = System.getProperty("cpwork.keystore");
            char[] pass = "changeit".toCharArray();
            KeyStore ks = KeyStore.getInstance("PKCS12");
            try (InputStream in = new FileInputStream(store)) { ks.load(in, pass); }
            KeyManagerFactory kmf = KeyManagerFactory.getInstance("SunX509");
            kmf.init(ks, pass);
            TrustManagerFactory tmf = TrustManagerFactory.getInstance("SunX509");
            tmf.init(ks);
            SSLContext ctx = SSLContext.getInstance("TLSv1.3");
            ctx.init(kmf.getKeyManagers(), tmf.getTrustManagers(), null);
            try (SSLServerSocket ss = (SSLServerSocket) ctx.getServerSocketFactory().createServerSocket(0, 50, InetAddress.getLoopbackAddress())) {
                echoServer(ss, 2);
                for (int c = 0; c < 3; c++) {
                    try (SSLSocket s = (SSLSocket) ctx.getSocketFactory().createSocket(InetAddress.getLoopbackAddress(), ss.getLocalPort())) {
                        s.startHandshake();
                        DataOutputStream out = new DataOutputStream(new BufferedOutputStream(s.getOutputStream()));
                        DataInputStream in = new DataInputStream(s.getInputStream());
                        byte[] back = new byte[CHUNK.length];
                        for (int i = 0; i < rounds / 3; i++) { int n = 16_000; out.writeInt(n); out.write(CHUNK, 0, n); out.flush(); in.readFully(back, 0, n); }
                    }
                }
            }
        });
        w.phase("dns-url", () -> {
            for (int i = 0; i < 200; i++) { InetAddress.getByName("localhost"); InetAddress.getAllByName("127.0.0.1"); new URI("http://h" + i + ".example/p?q=" + i).normalize(); }
        });
    }
}
