package cpwork;

import java.io.*;
import java.net.*;
import java.util.concurrent.*;

/** Network libraries from Debian: a Jetty server queried by Apache HttpClient, OkHttp and
 * HttpURLConnection; a Netty echo server and client. */
public final class LibNet {
    public static void main(String[] args) throws Exception {
        Work w = new Work(args);
        int rounds = 300 * w.scale;
        byte[] body = w.text(100_000);
        w.phase("jetty-clients", () -> {
            org.eclipse.jetty.server.Server server = new org.eclipse.jetty.server.Server(new InetSocketAddress("127.0.0.1", 0));
            server.setHandler(new org.eclipse.jetty.server.handler.AbstractHandler() {
                @Override public void handle(String target, org.eclipse.jetty.server.Request base, javax.servlet.http.HttpServletRequest req, javax.servlet.http.HttpServletResponse resp) throws IOException {
                    req.getInputStream().readAllBytes();
                    try { Thread.sleep(2); } catch (InterruptedException e) { }
                    resp.setStatus(200);
                    resp.getOutputStream().write(body);
                    base.setHandled(true);
                }
            });
            server.start();
            int port = ((org.eclipse.jetty.server.ServerConnector) server.getConnectors()[0]).getLocalPort();
            String url = "http://127.0.0.1:" + port + "/x";
            try {
                try (org.apache.http.impl.client.CloseableHttpClient client = org.apache.http.impl.client.HttpClients.createDefault()) {
                    for (int i = 0; i < rounds / 3; i++) {
                        org.apache.http.client.methods.HttpUriRequest req;
                        if (i % 2 == 0) req = new org.apache.http.client.methods.HttpGet(url);
                        else { org.apache.http.client.methods.HttpPost p = new org.apache.http.client.methods.HttpPost(url); p.setEntity(new org.apache.http.entity.ByteArrayEntity(body)); req = p; }
                        try (org.apache.http.client.methods.CloseableHttpResponse resp = client.execute(req)) { org.apache.http.util.EntityUtils.toByteArray(resp.getEntity()); }
                    }
                }
                okhttp3.OkHttpClient ok = new okhttp3.OkHttpClient();
                for (int i = 0; i < rounds / 3; i++) {
                    okhttp3.Request.Builder b = new okhttp3.Request.Builder().url(url);
                    if (i % 2 == 1) b.post(okhttp3.RequestBody.create(okhttp3.MediaType.parse("application/octet-stream"), body));
                    try (okhttp3.Response resp = ok.newCall(b.build()).execute()) { resp.body().bytes(); }
                }
                ok.dispatcher().executorService().shutdown();
                ok.connectionPool().evictAll();
                for (int i = 0; i < rounds / 3; i++) { try (InputStream in = new URL(url).openStream()) { in.readAllBytes(); } }
            } finally {
                server.stop();
            }
        });
        w.phase("jsoup", () -> {
            com.sun.net.httpserver.HttpServer server = com.sun.net.httpserver.HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 50);
            StringBuilder html = new StringBuilder("<html><head><title>t</title></head><body>");
            for (int i = 0; i < 3000; i++) html.append("<div class=row id=r").append(i).append("><a href='/p").append(i).append("'>link ").append(i).append("</a><p>text</p></div>");
            byte[] page = html.append("</body></html>").toString().getBytes();
            server.createContext("/", ex -> { try { Thread.sleep(2); } catch (InterruptedException e) { } ex.sendResponseHeaders(200, page.length); try (OutputStream o = ex.getResponseBody()) { o.write(page); } });
            server.start();
            try {
                String url = "http://127.0.0.1:" + server.getAddress().getPort() + "/";
                for (int i = 0; i < 60 * w.scale; i++) {
                    org.jsoup.nodes.Document doc = org.jsoup.Jsoup.connect(url).maxBodySize(0).get();
                    doc.select("div.row a[href]").size();
                    doc.outerHtml();
                }
                java.io.File f = w.dir.resolve("page.html").toFile();
                try (OutputStream o = new FileOutputStream(f)) { o.write(page); }
                for (int i = 0; i < 20; i++) org.jsoup.Jsoup.parse(f, "UTF-8").select("p").text();
            } finally {
                server.stop(0);
            }
        });
        w.phase("netty", () -> {
            io.netty.channel.EventLoopGroup boss = new io.netty.channel.nio.NioEventLoopGroup(1);
            io.netty.channel.EventLoopGroup workers = new io.netty.channel.nio.NioEventLoopGroup(2);
            try {
                io.netty.bootstrap.ServerBootstrap sb = new io.netty.bootstrap.ServerBootstrap();
                sb.group(boss, workers).channel(io.netty.channel.socket.nio.NioServerSocketChannel.class)
                  .childHandler(new io.netty.channel.ChannelInitializer<io.netty.channel.socket.SocketChannel>() {
                      @Override protected void initChannel(io.netty.channel.socket.SocketChannel ch) {
                          ch.pipeline().addLast(new io.netty.channel.ChannelInboundHandlerAdapter() {
                              @Override public void channelRead(io.netty.channel.ChannelHandlerContext ctx, Object msg) { ctx.writeAndFlush(msg); }
                          });
                      }
                  });
                io.netty.channel.Channel server = sb.bind("127.0.0.1", 0).sync().channel();
                int port = ((InetSocketAddress) server.localAddress()).getPort();
                BlockingQueue<Integer> got = new LinkedBlockingQueue<>();
                io.netty.bootstrap.Bootstrap cb = new io.netty.bootstrap.Bootstrap();
                cb.group(workers).channel(io.netty.channel.socket.nio.NioSocketChannel.class)
                  .handler(new io.netty.channel.ChannelInboundHandlerAdapter() {
                      @Override public void channelRead(io.netty.channel.ChannelHandlerContext ctx, Object msg) {
                          io.netty.buffer.ByteBuf b = (io.netty.buffer.ByteBuf) msg; got.add(b.readableBytes()); b.release();
                      }
                  });
                io.netty.channel.Channel client = cb.connect("127.0.0.1", port).sync().channel();
                for (int i = 0; i < rounds * 2; i++) {
                    client.writeAndFlush(io.netty.buffer.Unpooled.wrappedBuffer(body, 0, 8192)).sync();
                    int have = 0;
                    while (have < 8192) { Integer n = got.poll(5, TimeUnit.SECONDS); if (n == null) break; have += n; }
                }
                client.close().sync();
                server.close().sync();
            } finally {
                boss.shutdownGracefully(0, 100, TimeUnit.MILLISECONDS).sync();
                workers.shutdownGracefully(0, 100, TimeUnit.MILLISECONDS).sync();
            }
        });
        w.phase("socket-server-files", () -> {
            File f = w.dir.resolve("served.bin").toFile();
            try (FileOutputStream out = new FileOutputStream(f)) { for (int i = 0; i < 16; i++) out.write(body); }
            try (ServerSocket ss = new ServerSocket(0, 50, InetAddress.getLoopbackAddress())) {
                Thread t = new Thread(() -> {
                    for (int i = 0; i < 20; i++) try (Socket s = ss.accept(); FileInputStream in = new FileInputStream(f)) { in.transferTo(s.getOutputStream()); } catch (IOException e) { }
                });
                t.start();
                for (int i = 0; i < 20; i++) try (Socket s = new Socket(InetAddress.getLoopbackAddress(), ss.getLocalPort()); FileOutputStream out = new FileOutputStream(w.dir.resolve("recv.bin").toFile())) { s.getInputStream().transferTo(out); }
                t.join();
            }
        });
    }
}
