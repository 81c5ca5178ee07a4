package cpwork;

import static cpwork.Work.pause;

import java.io.*;
import java.net.*;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.util.*;
import java.util.concurrent.*;

/** More network libraries from Debian, each against a slow-ish peer over loopback so that the client
 * waits on the network: Apache MINA echo and text-line servers and clients, JeroMQ REQ/REP and PUSH/PULL
 * over tcp, commons-net clients (SMTP, POP3, FTP, echo/discard TCP and UDP, daytime, finger, whois,
 * telnet) and Jakarta Mail (SMTP transport, POP3 store) against small protocol servers written here,
 * and Apache HttpAsyncClient against a small HTTP server that paces large bodies. */
public final class LibNet2 {
    static volatile Object sink;
    static final int REPLY_DELAY_MS = 2;

    public static void main(String[] args) throws Exception {
        Work w = new Work(args);
        w.phase("mina", () -> mina(w));
        w.phase("jeromq", () -> jeromq(w));
        w.phase("commons-net-mail", withServers(open -> commonsNetMail(w, open)));
        w.phase("commons-net", withServers(open -> commonsNet(w, open)));
        w.phase("jakarta-mail", withServers(open -> jakartaMail(w, open)));
        w.phase("httpasyncclient", withServers(open -> httpAsync(w, open)));
    }

    interface ServedStep {
        void run(List<Closeable> open) throws Exception;
    }

    /** A phase whose servers and clients, registered in {@code open}, are closed when it ends, failed or not. */
    static Work.Step withServers(ServedStep step) {
        return () -> {
            List<Closeable> open = new ArrayList<>();
            try { step.run(open); } finally { for (Closeable c : open) c.close(); }
        };
    }

    // ---------------------------------------------------------------------------------------------
    // Apache MINA

    static void mina(Work w) throws Exception {
        ScheduledExecutorService later = Executors.newScheduledThreadPool(2);
        ExecutorService clients = Executors.newFixedThreadPool(4);
        org.apache.mina.transport.socket.nio.NioSocketAcceptor echo = new org.apache.mina.transport.socket.nio.NioSocketAcceptor(2);
        org.apache.mina.transport.socket.nio.NioSocketAcceptor lines = new org.apache.mina.transport.socket.nio.NioSocketAcceptor(1);
        org.apache.mina.transport.socket.nio.NioSocketConnector connector = new org.apache.mina.transport.socket.nio.NioSocketConnector(2);
        org.apache.mina.transport.socket.nio.NioSocketConnector lineConnector = new org.apache.mina.transport.socket.nio.NioSocketConnector(1);
        try {
            // The echo server answers each buffer a little later (scheduled, not slept in a MINA callback).
            echo.setHandler(new org.apache.mina.core.service.IoHandlerAdapter() {
                @Override public void messageReceived(org.apache.mina.core.session.IoSession session, Object message) {
                    org.apache.mina.core.buffer.IoBuffer in = (org.apache.mina.core.buffer.IoBuffer) message;
                    org.apache.mina.core.buffer.IoBuffer copy = org.apache.mina.core.buffer.IoBuffer.allocate(in.remaining());
                    copy.put(in).flip();
                    later.schedule(() -> session.write(copy), 1, TimeUnit.MILLISECONDS);
                }
            });
            echo.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
            lines.getFilterChain().addLast("codec", new org.apache.mina.filter.codec.ProtocolCodecFilter(textLines()));
            lines.setHandler(new org.apache.mina.core.service.IoHandlerAdapter() {
                @Override public void messageReceived(org.apache.mina.core.session.IoSession session, Object message) {
                    String line = (String) message;
                    later.schedule(() -> session.write(line.toUpperCase()), REPLY_DELAY_MS, TimeUnit.MILLISECONDS);
                }
            });
            lines.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));

            connector.getSessionConfig().setUseReadOperation(true);
            connector.setHandler(new org.apache.mina.core.service.IoHandlerAdapter());
            byte[] payload = w.bytes(48 << 10);
            int rounds = 1500 * w.scale;
            List<Future<?>> done = new ArrayList<>();
            for (int c = 0; c < 4; c++) {
                done.add(clients.submit(() -> {
                    org.apache.mina.core.future.ConnectFuture cf = connector.connect(echo.getLocalAddress());
                    cf.awaitUninterruptibly();
                    org.apache.mina.core.session.IoSession s = cf.getSession();
                    for (int i = 0; i < rounds; i++) {
                        s.write(org.apache.mina.core.buffer.IoBuffer.wrap(payload)).awaitUninterruptibly();
                        int got = 0;
                        while (got < payload.length) {
                            org.apache.mina.core.future.ReadFuture rf = s.read();
                            if (!rf.awaitUninterruptibly(10_000) || rf.getMessage() == null) throw new IOException("mina echo stalled");
                            got += ((org.apache.mina.core.buffer.IoBuffer) rf.getMessage()).remaining();
                        }
                    }
                    s.closeNow().awaitUninterruptibly();
                    return null;
                }));
            }
            // Text lines through the codec filter on both sides.
            lineConnector.getSessionConfig().setUseReadOperation(true);
            lineConnector.getFilterChain().addLast("codec", new org.apache.mina.filter.codec.ProtocolCodecFilter(textLines()));
            lineConnector.setHandler(new org.apache.mina.core.service.IoHandlerAdapter());
            org.apache.mina.core.future.ConnectFuture cf = lineConnector.connect(lines.getLocalAddress());
            cf.awaitUninterruptibly();
            org.apache.mina.core.session.IoSession s = cf.getSession();
            String text = new String(w.text(2000), StandardCharsets.US_ASCII);
            for (int i = 0; i < 2500 * w.scale; i++) {
                s.write(text + i);
                org.apache.mina.core.future.ReadFuture rf = s.read();
                if (!rf.awaitUninterruptibly(10_000)) throw new IOException("mina lines stalled");
                sink = rf.getMessage();
            }
            s.closeNow().awaitUninterruptibly();
            for (Future<?> f : done) f.get();
        } finally {
            clients.shutdownNow();
            connector.dispose(true);
            lineConnector.dispose(true);
            echo.dispose(true);
            lines.dispose(true);
            later.shutdownNow();
        }
    }

    static org.apache.mina.filter.codec.textline.TextLineCodecFactory textLines() {
        org.apache.mina.filter.codec.textline.TextLineCodecFactory codec = new org.apache.mina.filter.codec.textline.TextLineCodecFactory(StandardCharsets.UTF_8);
        codec.setDecoderMaxLineLength(1 << 16);
        codec.setEncoderMaxLineLength(1 << 16);
        return codec;
    }

    // ---------------------------------------------------------------------------------------------
    // JeroMQ

    static void jeromq(Work w) throws Exception {
        org.zeromq.ZMQ.Context ctx = org.zeromq.ZMQ.context(1);
        try {
            int requests = 2500 * w.scale;
            byte[] reply = w.bytes(16 << 10);
            org.zeromq.ZMQ.Socket rep = ctx.socket(org.zeromq.ZMQ.REP);
            rep.setLinger(0);
            int repPort = rep.bindToRandomPort("tcp://127.0.0.1");
            Thread server = new Thread(() -> {
                try {
                    for (int i = 0; i < requests; i++) {
                        sink = rep.recv(0);
                        pause(1);
                        rep.send(reply, 0);
                    }
                } finally {
                    rep.close();
                }
            });
            server.start();
            org.zeromq.ZMQ.Socket req = ctx.socket(org.zeromq.ZMQ.REQ);
            req.setLinger(0);
            req.connect("tcp://127.0.0.1:" + repPort);
            byte[] ask = w.bytes(4096);
            for (int i = 0; i < requests; i++) {
                req.send(ask, 0);
                sink = req.recv(0);
            }
            req.close();
            server.join();

            // PUSH/PULL: the puller drains slowly, so the pusher runs into its high-water mark and waits.
            int messages = 12_000 * w.scale;
            byte[] part = w.bytes(32 << 10);
            org.zeromq.ZMQ.Socket pull = ctx.socket(org.zeromq.ZMQ.PULL);
            pull.setLinger(0);
            pull.setRcvHWM(50);
            int pullPort = pull.bindToRandomPort("tcp://127.0.0.1");
            Thread puller = new Thread(() -> {
                try {
                    for (int i = 0; i < messages; i++) {
                        sink = pull.recv(0);
                        if (i % 8 == 7) pause(1);
                    }
                } finally {
                    pull.close();
                }
            });
            puller.start();
            org.zeromq.ZMQ.Socket push = ctx.socket(org.zeromq.ZMQ.PUSH);
            push.setLinger(1000);
            push.setSndHWM(50);
            push.connect("tcp://127.0.0.1:" + pullPort);
            for (int i = 0; i < messages; i++) push.send(part, 0);
            puller.join();
            push.close();
        } finally {
            ctx.term();
        }
    }

    // ---------------------------------------------------------------------------------------------
    // commons-net against small servers

    static void commonsNetMail(Work w, List<Closeable> open) throws Exception {
        InetAddress lo = InetAddress.getLoopbackAddress();
        Mailbox box = new Mailbox(w, 6, 150_000);
        int smtpPort = serveLines(open, LibNet2::smtp);
        int pop3Port = serveLines(open, (in, out, s) -> pop3(in, out, box));
        String body = lines(w.text(60_000));
        for (int i = 0; i < 45 * w.scale; i++) {
            org.apache.commons.net.smtp.SMTPClient c = new org.apache.commons.net.smtp.SMTPClient();
            c.connect(lo, smtpPort);
            c.login("cp.localhost");
            for (int m = 0; m < 2; m++) {
                c.setSender("a" + i + "@localhost");
                c.addRecipient("b@localhost");
                c.addRecipient("c@localhost");
                try (Writer wr = c.sendMessageData()) {
                    wr.write("From: a@localhost\r\nTo: b@localhost\r\nSubject: m" + i + "\r\n\r\n");
                    wr.write(body);
                }
                c.completePendingCommand();
            }
            c.sendSimpleMessage("a@localhost", new String[] {"b@localhost", "c@localhost"}, "Subject: short\r\n\r\nhello\r\n");
            c.verify("b@localhost");
            c.sendNoOp();
            c.reset();
            c.logout();
            c.disconnect();
        }
        for (int i = 0; i < 40 * w.scale; i++) {
            org.apache.commons.net.pop3.POP3Client c = new org.apache.commons.net.pop3.POP3Client();
            c.connect(lo, pop3Port);
            c.capa();
            c.login("user", "secret");
            sink = c.status();
            sink = c.listMessages();
            sink = c.listUniqueIdentifiers();
            for (int m = 1; m <= box.size(); m++) {
                try (Reader r = c.retrieveMessage(m)) { sink = readAll(r); }
                try (Reader r = c.retrieveMessageTop(m, 5)) { sink = readAll(r); }
            }
            c.noop();
            c.logout();
            c.disconnect();
        }
    }

    static void commonsNet(Work w, List<Closeable> open) throws Exception {
        InetAddress lo = InetAddress.getLoopbackAddress();
        Path ftpRoot = Files.createDirectories(w.dir.resolve("ftp"));
        int ftpPort = serveLines(open, (in, out, s) -> ftp(in, out, ftpRoot));
        int dayPort = serveLines(open, (in, out, s) -> { pause(REPLY_DELAY_MS); out.write(new Date() + "\r\n"); out.flush(); });
        String fingerText = new String(w.text(20_000), StandardCharsets.US_ASCII);
        int fingerPort = serveLines(open, (in, out, s) -> { String who = in.readLine(); pause(REPLY_DELAY_MS); out.write(who + ": " + fingerText + "\r\n"); out.flush(); });
        int echoPort = serveLines(open, (in, out, s) -> {
            InputStream raw = s.getInputStream();
            OutputStream o = s.getOutputStream();
            byte[] buf = new byte[16 << 10];
            for (int n; (n = raw.read(buf)) > 0; ) { pause(1); o.write(buf, 0, n); o.flush(); }
        });
        int discardPort = serveLines(open, (in, out, s) -> {
            InputStream raw = s.getInputStream();
            byte[] buf = new byte[64 << 10];
            for (int n, k = 0; (n = raw.read(buf)) > 0; k++) if (k % 4 == 3) pause(1); // a slow reader: the writer fills the socket buffer
        });
        DatagramSocket udp = new DatagramSocket(0, lo);
        open.add(udp);
        Thread udpEcho = new Thread(() -> {
            byte[] buf = new byte[65_000];
            try {
                while (true) {
                    DatagramPacket p = new DatagramPacket(buf, buf.length);
                    udp.receive(p);
                    pause(1);
                    udp.send(new DatagramPacket(buf, p.getLength(), p.getSocketAddress()));
                }
            } catch (IOException e) { }
        });
        udpEcho.setDaemon(true);
        udpEcho.start();

        Path local = w.dir.resolve("upload.bin");
        Files.write(local, w.bytes(4 << 20));
        for (int i = 0; i < 6 * w.scale; i++) {
            org.apache.commons.net.ftp.FTPClient c = new org.apache.commons.net.ftp.FTPClient();
            c.connect(lo, ftpPort);
            c.login("user", "secret");
            c.setFileType(org.apache.commons.net.ftp.FTP.BINARY_FILE_TYPE);
            c.setBufferSize(64 << 10);
            c.enterLocalPassiveMode();
            for (int k = 0; k < 4; k++) {
                try (InputStream in = Files.newInputStream(local)) { c.storeFile("f" + k + ".bin", in); }
            }
            sink = c.listFiles();
            sink = c.listNames();
            for (int k = 0; k < 4; k++) {
                try (OutputStream out = new FileOutputStream(w.dir.resolve("down" + k + ".bin").toFile())) { c.retrieveFile("f" + k + ".bin", out); }
            }
            try (InputStream in = c.retrieveFileStream("f0.bin")) { in.transferTo(OutputStream.nullOutputStream()); }
            c.completePendingCommand();
            sink = c.getSize("f1.bin");
            c.deleteFile("f3.bin");
            c.logout();
            c.disconnect();
        }
        byte[] chunk = w.bytes(8 << 10);
        org.apache.commons.net.echo.EchoUDPClient eu = new org.apache.commons.net.echo.EchoUDPClient();
        eu.open();
        eu.setSoTimeout(5000);
        byte[] back = new byte[chunk.length];
        for (int i = 0; i < 1500 * w.scale; i++) {
            eu.send(chunk, chunk.length, lo, udp.getLocalPort());
            eu.receive(back);
        }
        eu.close();
        for (int i = 0; i < 20 * w.scale; i++) {
            org.apache.commons.net.echo.EchoTCPClient et = new org.apache.commons.net.echo.EchoTCPClient();
            et.connect(lo, echoPort);
            for (int k = 0; k < 40; k++) {
                et.getOutputStream().write(chunk);
                et.getOutputStream().flush();
                sink = et.getInputStream().readNBytes(chunk.length);
            }
            et.disconnect();
            org.apache.commons.net.discard.DiscardTCPClient dt = new org.apache.commons.net.discard.DiscardTCPClient();
            dt.connect(lo, discardPort);
            for (int k = 0; k < 600; k++) dt.getOutputStream().write(chunk);
            dt.disconnect();
        }
        for (int i = 0; i < 250 * w.scale; i++) {
            org.apache.commons.net.daytime.DaytimeTCPClient d = new org.apache.commons.net.daytime.DaytimeTCPClient();
            d.connect(lo, dayPort);
            sink = d.getTime();
            d.disconnect();
            org.apache.commons.net.finger.FingerClient f = new org.apache.commons.net.finger.FingerClient();
            f.connect(lo, fingerPort);
            sink = f.query(i % 2 == 0, "user" + i);
            f.disconnect();
            org.apache.commons.net.whois.WhoisClient wh = new org.apache.commons.net.whois.WhoisClient();
            wh.connect(lo, fingerPort);
            sink = wh.query("example" + i);
            wh.disconnect();
        }
        for (int i = 0; i < 10 * w.scale; i++) {
            org.apache.commons.net.telnet.TelnetClient t = new org.apache.commons.net.telnet.TelnetClient();
            t.connect(lo, echoPort);
            OutputStream out = t.getOutputStream();
            InputStream in = t.getInputStream();
            byte[] line = (fingerText.substring(0, 1000) + "\r\n").getBytes(StandardCharsets.US_ASCII);
            byte[] buf = new byte[4096];
            for (int k = 0; k < 100; k++) {
                out.write(line);
                out.flush();
                int got = 0;
                while (got < line.length) { int n = in.read(buf); if (n < 0) throw new EOFException(); got += n; }
            }
            t.disconnect();
        }
    }

    // ---------------------------------------------------------------------------------------------
    // Jakarta Mail against the same SMTP and POP3 servers

    static void jakartaMail(Work w, List<Closeable> open) throws Exception {
        Mailbox box = new Mailbox(w, 8, 200_000);
        int smtpPort = serveLines(open, LibNet2::smtp);
        int pop3Port = serveLines(open, (in, out, s) -> pop3(in, out, box));
        Properties props = new Properties();
        props.put("mail.smtp.host", "127.0.0.1");
        props.put("mail.smtp.port", String.valueOf(smtpPort));
        props.put("mail.smtp.localhost", "cp.localhost");
        props.put("mail.from", "cp@localhost");
        props.put("mail.pop3.host", "127.0.0.1");
        props.put("mail.pop3.port", String.valueOf(pop3Port));
        jakarta.mail.Session session = jakarta.mail.Session.getInstance(props);
        byte[] attachment = w.bytes(120_000);
        String text = lines(w.text(30_000));
        for (int round = 0; round < 6 * w.scale; round++) {
            jakarta.mail.Transport t = session.getTransport("smtp");
            t.connect();
            for (int i = 0; i < 25; i++) {
                jakarta.mail.internet.MimeMessage m = new jakarta.mail.internet.MimeMessage(session);
                m.setFrom(new jakarta.mail.internet.InternetAddress("a@localhost"));
                m.setRecipients(jakarta.mail.Message.RecipientType.TO, "b@localhost, c@localhost");
                m.setSubject("report " + round + "/" + i);
                jakarta.mail.internet.MimeMultipart mp = new jakarta.mail.internet.MimeMultipart();
                jakarta.mail.internet.MimeBodyPart p1 = new jakarta.mail.internet.MimeBodyPart();
                p1.setText(text);
                mp.addBodyPart(p1);
                jakarta.mail.internet.MimeBodyPart p2 = new jakarta.mail.internet.MimeBodyPart();
                p2.setDataHandler(new jakarta.activation.DataHandler(new jakarta.mail.util.ByteArrayDataSource(attachment, "application/octet-stream")));
                p2.setFileName("data.bin");
                mp.addBodyPart(p2);
                m.setContent(mp);
                m.saveChanges();
                t.sendMessage(m, m.getAllRecipients());
            }
            t.close();
            jakarta.mail.internet.MimeMessage m = new jakarta.mail.internet.MimeMessage(session);
            m.setFrom(new jakarta.mail.internet.InternetAddress("a@localhost"));
            m.setRecipients(jakarta.mail.Message.RecipientType.TO, "b@localhost");
            m.setSubject("single " + round);
            m.setText(text);
            jakarta.mail.Transport.send(m);
        }
        for (int round = 0; round < 10 * w.scale; round++) {
            jakarta.mail.Store store = session.getStore("pop3");
            store.connect("127.0.0.1", pop3Port, "user", "secret");
            jakarta.mail.Folder inbox = store.getFolder("INBOX");
            inbox.open(jakarta.mail.Folder.READ_ONLY);
            for (jakarta.mail.Message m : inbox.getMessages()) {
                sink = m.getSubject();
                sink = m.getSize();
                Object content = m.getContent();
                if (content instanceof jakarta.mail.Multipart mp) {
                    for (int i = 0; i < mp.getCount(); i++) {
                        try (InputStream in = mp.getBodyPart(i).getInputStream()) { sink = in.readAllBytes(); }
                    }
                }
            }
            inbox.close(false);
            store.close();
        }
    }

    // ---------------------------------------------------------------------------------------------
    // Apache HttpAsyncClient against a pacing HTTP server

    static void httpAsync(Work w, List<Closeable> open) throws Exception {
        int port = serveHttp(open);
        String base = "http://127.0.0.1:" + port;
        org.apache.http.impl.nio.client.CloseableHttpAsyncClient client = org.apache.http.impl.nio.client.HttpAsyncClients.custom()
            .setMaxConnPerRoute(4).setMaxConnTotal(4).build();
        client.start();
        try {
            for (int round = 0; round < 60 * w.scale; round++) {
                List<Future<org.apache.http.HttpResponse>> pending = new ArrayList<>();
                for (int i = 0; i < 8; i++) pending.add(client.execute(new org.apache.http.client.methods.HttpGet(base + "/get?n=" + (1 << 20)), null));
                for (Future<org.apache.http.HttpResponse> f : pending) sink = org.apache.http.util.EntityUtils.toByteArray(f.get().getEntity());
            }
            byte[] post = w.bytes(256 << 10);
            for (int i = 0; i < 100 * w.scale; i++) {
                org.apache.http.client.methods.HttpPost p = new org.apache.http.client.methods.HttpPost(base + "/post");
                p.setEntity(new org.apache.http.entity.ByteArrayEntity(post));
                sink = org.apache.http.util.EntityUtils.toByteArray(client.execute(p, null).get().getEntity());
            }
            File upload = w.dir.resolve("upload.bin").toFile();
            Files.write(upload.toPath(), w.bytes(4 << 20));
            for (int i = 0; i < 20 * w.scale; i++) {
                File down = w.dir.resolve("down" + i % 3 + ".bin").toFile();
                sink = client.execute(org.apache.http.nio.client.methods.HttpAsyncMethods.createGet(base + "/get?n=" + (4 << 20)),
                    org.apache.http.nio.client.methods.HttpAsyncMethods.createZeroCopyConsumer(down), null).get();
                sink = client.execute(org.apache.http.nio.client.methods.HttpAsyncMethods.createZeroCopyPost(base + "/post", upload,
                    org.apache.http.entity.ContentType.APPLICATION_OCTET_STREAM), org.apache.http.nio.client.methods.HttpAsyncMethods.createConsumer(), null).get();
            }
            CountDownLatch latch = new CountDownLatch(100 * w.scale);
            for (int i = 0; i < 100 * w.scale; i++) {
                client.execute(new org.apache.http.client.methods.HttpGet(base + "/get?n=" + (128 << 10)), new org.apache.http.concurrent.FutureCallback<org.apache.http.HttpResponse>() {
                    @Override public void completed(org.apache.http.HttpResponse r) { latch.countDown(); }
                    @Override public void failed(Exception e) { latch.countDown(); }
                    @Override public void cancelled() { latch.countDown(); }
                });
            }
            if (!latch.await(120, TimeUnit.SECONDS)) throw new IOException("async GETs stalled");
        } finally {
            client.close();
        }
    }

    /** HTTP/1.1 with keep-alive: GET /get?n=N sends N bytes in 64 KiB pieces, a millisecond apart; POST
     * reads the body and answers "ok". */
    static int serveHttp(List<Closeable> open) throws IOException {
        byte[] piece = new byte[64 << 10];
        new Random(3).nextBytes(piece);
        return serve(open, s -> {
            InputStream in = new BufferedInputStream(s.getInputStream());
            OutputStream out = new BufferedOutputStream(s.getOutputStream(), 1 << 16);
            while (true) {
                String request = readLine(in);
                if (request == null || request.isEmpty()) return;
                long length = 0;
                boolean chunked = false;
                for (String h; (h = readLine(in)) != null && !h.isEmpty(); ) {
                    String lower = h.toLowerCase(Locale.ROOT);
                    if (lower.startsWith("content-length:")) length = Long.parseLong(h.substring(15).trim());
                    if (lower.startsWith("transfer-encoding:") && lower.contains("chunked")) chunked = true;
                }
                if (chunked) {
                    for (long n; (n = Long.parseLong(readLine(in).split(";")[0].trim(), 16)) > 0; ) { in.skipNBytes(n); readLine(in); }
                    readLine(in);
                } else {
                    in.skipNBytes(length);
                }
                if (request.startsWith("GET")) {
                    int q = request.indexOf("n=");
                    long n = q < 0 ? 1000 : Long.parseLong(request.substring(q + 2, request.indexOf(' ', q)));
                    out.write(("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: " + n + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
                    for (long sent = 0; sent < n; sent += piece.length) {
                        out.write(piece, 0, (int) Math.min(piece.length, n - sent));
                        out.flush();
                        pause(1);
                    }
                } else {
                    pause(REPLY_DELAY_MS);
                    out.write("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok".getBytes(StandardCharsets.US_ASCII));
                }
                out.flush();
            }
        });
    }

    static String readLine(InputStream in) throws IOException {
        StringBuilder sb = new StringBuilder();
        for (int c; (c = in.read()) >= 0; ) {
            if (c == '\n') return sb.toString();
            if (c != '\r') sb.append((char) c);
        }
        return sb.length() == 0 ? null : sb.toString();
    }

    // ---------------------------------------------------------------------------------------------
    // Small protocol servers (one thread per connection; each reply a few milliseconds late)

    interface SocketServer {
        void serve(Socket s) throws Exception;
    }

    interface LineServer {
        void serve(BufferedReader in, Writer out, Socket s) throws Exception;
    }

    static int serve(List<Closeable> open, SocketServer server) throws IOException {
        ServerSocket ss = new ServerSocket(0, 100, InetAddress.getLoopbackAddress());
        open.add(ss);
        Thread acceptor = new Thread(() -> {
            while (!ss.isClosed()) {
                try {
                    Socket s = ss.accept();
                    Thread t = new Thread(() -> { try (s) { server.serve(s); } catch (Exception e) { } });
                    t.setDaemon(true);
                    t.start();
                } catch (IOException e) {
                    return;
                }
            }
        });
        acceptor.setDaemon(true);
        acceptor.start();
        return ss.getLocalPort();
    }

    static int serveLines(List<Closeable> open, LineServer server) throws IOException {
        return serve(open, s -> server.serve(new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.ISO_8859_1)),
            new BufferedWriter(new OutputStreamWriter(s.getOutputStream(), StandardCharsets.ISO_8859_1), 1 << 16), s));
    }

    static void reply(Writer out, String text) throws IOException {
        pause(REPLY_DELAY_MS);
        out.write(text);
        out.write("\r\n");
        out.flush();
    }

    static void smtp(BufferedReader in, Writer out, Socket s) throws IOException {
        reply(out, "220 cp.localhost ESMTP");
        for (String line; (line = in.readLine()) != null; ) {
            String cmd = line.length() >= 4 ? line.substring(0, 4).toUpperCase(Locale.ROOT) : line.toUpperCase(Locale.ROOT);
            switch (cmd) {
                case "EHLO" -> reply(out, "250-cp.localhost\r\n250-SIZE 100000000\r\n250-8BITMIME\r\n250 HELP");
                case "HELO" -> reply(out, "250 cp.localhost");
                case "MAIL", "RCPT", "RSET", "NOOP" -> reply(out, "250 OK");
                case "VRFY" -> reply(out, "252 cannot verify, will accept");
                case "HELP" -> reply(out, "214 see RFC 5321");
                case "DATA" -> {
                    reply(out, "354 end with <CRLF>.<CRLF>");
                    long size = 0;
                    for (String l; (l = in.readLine()) != null && !l.equals("."); ) size += l.length();
                    reply(out, "250 queued " + size);
                }
                case "QUIT" -> { reply(out, "221 bye"); return; }
                default -> reply(out, "502 not implemented");
            }
        }
    }

    /** Messages in a POP3 maildrop: multipart, text and a base64 attachment. */
    static final class Mailbox {
        final List<String> messages = new ArrayList<>();

        Mailbox(Work w, int count, int attachmentBytes) {
            for (int i = 0; i < count; i++) {
                String text = lines(w.text(20_000));
                String attachment = Base64.getMimeEncoder().encodeToString(w.bytes(attachmentBytes));
                messages.add("From: a@localhost\r\nTo: b@localhost\r\nSubject: stored " + i + "\r\nMessage-ID: <" + i + "@cp.localhost>\r\n"
                    + "MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"cpbound\"\r\n\r\n"
                    + "--cpbound\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\n" + text
                    + "--cpbound\r\nContent-Type: application/octet-stream\r\nContent-Transfer-Encoding: base64\r\n"
                    + "Content-Disposition: attachment; filename=\"a" + i + ".bin\"\r\n\r\n" + attachment + "\r\n--cpbound--\r\n");
            }
        }

        int size() { return messages.size(); }
    }

    static void pop3(BufferedReader in, Writer out, Mailbox box) throws IOException {
        reply(out, "+OK cp POP3 ready");
        for (String line; (line = in.readLine()) != null; ) {
            String[] p = line.split(" ");
            switch (p[0].toUpperCase(Locale.ROOT)) {
                case "CAPA" -> reply(out, "+OK\r\nUSER\r\nUIDL\r\nTOP\r\n.");
                case "USER", "PASS", "NOOP", "RSET", "DELE" -> reply(out, "+OK");
                case "STAT" -> reply(out, "+OK " + box.size() + " " + box.messages.stream().mapToInt(String::length).sum());
                case "LIST", "UIDL" -> {
                    boolean uidl = p[0].equalsIgnoreCase("UIDL");
                    if (p.length > 1) {
                        int k = Integer.parseInt(p[1]);
                        reply(out, "+OK " + k + " " + (uidl ? "uid" + k : String.valueOf(box.messages.get(k - 1).length())));
                    } else {
                        StringBuilder sb = new StringBuilder("+OK\r\n");
                        for (int k = 1; k <= box.size(); k++) sb.append(k).append(' ').append(uidl ? "uid" + k : String.valueOf(box.messages.get(k - 1).length())).append("\r\n");
                        reply(out, sb.append('.').toString());
                    }
                }
                case "RETR", "TOP" -> {
                    String m = box.messages.get(Integer.parseInt(p[1]) - 1);
                    if (p[0].equalsIgnoreCase("TOP")) m = m.substring(0, m.indexOf("\r\n\r\n") + 4);
                    pause(REPLY_DELAY_MS);
                    out.write("+OK " + m.length() + " octets\r\n");
                    for (String l : m.split("\r\n", -1)) {
                        if (l.startsWith(".")) out.write('.');
                        out.write(l);
                        out.write("\r\n");
                    }
                    out.write(".\r\n");
                    out.flush();
                }
                case "QUIT" -> { reply(out, "+OK bye"); return; }
                default -> reply(out, "-ERR unknown");
            }
        }
    }

    /** Passive-mode FTP over a directory: USER/PASS, TYPE, PASV, STOR, RETR, LIST, NLST, SIZE, DELE. Data
     * goes out and comes in 64 KiB at a time, a millisecond apart. */
    static void ftp(BufferedReader in, Writer out, Path root) throws IOException {
        reply(out, "220 cp FTP ready");
        ServerSocket data = null;
        try {
            for (String line; (line = in.readLine()) != null; ) {
                int sp = line.indexOf(' ');
                String cmd = (sp < 0 ? line : line.substring(0, sp)).toUpperCase(Locale.ROOT);
                String arg = sp < 0 ? "" : line.substring(sp + 1);
                switch (cmd) {
                    case "USER" -> reply(out, "331 password please");
                    case "PASS" -> reply(out, "230 logged in");
                    case "SYST" -> reply(out, "215 UNIX Type: L8");
                    case "TYPE", "MODE", "STRU", "NOOP" -> reply(out, "200 OK");
                    case "PWD" -> reply(out, "257 \"/\"");
                    case "SIZE" -> reply(out, Files.exists(root.resolve(arg)) ? "213 " + Files.size(root.resolve(arg)) : "550 no such file");
                    case "DELE" -> { Files.deleteIfExists(root.resolve(arg)); reply(out, "250 deleted"); }
                    case "PASV" -> {
                        if (data != null) data.close();
                        data = new ServerSocket(0, 1, InetAddress.getLoopbackAddress());
                        int port = data.getLocalPort();
                        reply(out, "227 Entering Passive Mode (127,0,0,1," + (port >> 8) + "," + (port & 255) + ")");
                    }
                    case "STOR" -> {
                        reply(out, "150 send it");
                        try (Socket d = data.accept(); OutputStream f = Files.newOutputStream(root.resolve(arg))) {
                            InputStream i = d.getInputStream();
                            byte[] buf = new byte[64 << 10];
                            for (int n; (n = i.read(buf)) > 0; ) { f.write(buf, 0, n); pause(1); } // a slow reader: the client's writes wait
                        }
                        reply(out, "226 stored");
                    }
                    case "RETR" -> {
                        Path f = root.resolve(arg);
                        if (!Files.exists(f)) { reply(out, "550 no such file"); break; }
                        reply(out, "150 here it comes");
                        try (Socket d = data.accept(); InputStream src = Files.newInputStream(f)) {
                            OutputStream o = d.getOutputStream();
                            byte[] buf = new byte[64 << 10];
                            for (int n; (n = src.read(buf)) > 0; ) { o.write(buf, 0, n); pause(1); }
                        }
                        reply(out, "226 sent");
                    }
                    case "LIST", "NLST" -> {
                        reply(out, "150 listing");
                        try (Socket d = data.accept(); Writer o = new OutputStreamWriter(d.getOutputStream(), StandardCharsets.US_ASCII);
                             DirectoryStream<Path> ds = Files.newDirectoryStream(root)) {
                            for (Path p : ds) {
                                String name = p.getFileName().toString();
                                o.write(cmd.equals("NLST") ? name + "\r\n" : "-rw-r--r--   1 cp cp " + Files.size(p) + " Jan 01 00:00 " + name + "\r\n");
                            }
                        }
                        reply(out, "226 done");
                    }
                    case "QUIT" -> { reply(out, "221 bye"); return; }
                    default -> reply(out, "502 not implemented");
                }
            }
        } finally {
            if (data != null) data.close();
        }
    }

    static String lines(byte[] text) {
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < text.length; i += 70) sb.append(new String(text, i, Math.min(70, text.length - i), StandardCharsets.US_ASCII)).append("\r\n");
        return sb.toString();
    }

    static String readAll(Reader r) throws IOException {
        StringWriter sw = new StringWriter();
        r.transferTo(sw);
        return sw.toString();
    }
}
