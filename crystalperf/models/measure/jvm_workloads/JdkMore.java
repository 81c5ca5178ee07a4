package cpwork;

import java.awt.image.BufferedImage;
import java.io.*;
import java.net.URL;
import java.nio.file.*;
import java.rmi.Remote;
import java.rmi.RemoteException;
import java.rmi.registry.LocateRegistry;
import java.rmi.registry.Registry;
import java.rmi.server.UnicastRemoteObject;
import java.util.*;
import java.util.concurrent.TimeUnit;
import java.util.prefs.Preferences;

/** More JDK I/O: RMI calls over loopback, image files, file: and jar: URLs, preferences, a watch service. */
public final class JdkMore {
    public interface Store extends Remote {
        byte[] get(int size) throws RemoteException;
        int put(byte[] data) throws RemoteException;
        Map<String, List<Integer>> table(int rows) throws RemoteException;
    }

    static final class StoreImpl implements Store {
        public byte[] get(int size) { try { Thread.sleep(1); } catch (InterruptedException e) { } return new byte[size]; }
        public int put(byte[] data) { return data.length; }
        public Map<String, List<Integer>> table(int rows) {
            Map<String, List<Integer>> m = new HashMap<>();
            for (int i = 0; i < rows; i++) m.put("r" + i, List.of(i, i * 2));
            return m;
        }
    }

    public static void main(String[] args) throws Exception {
        Work w = new Work(args);
        w.phase("rmi", () -> {
            System.setProperty("java.rmi.server.hostname", "127.0.0.1");
            // The registry API does not report an ephemeral port back; one derived from the pid rarely collides.
            int port = 20000 + (int) (ProcessHandle.current().pid() % 20000);
            Registry registry = LocateRegistry.createRegistry(port);
            StoreImpl impl = new StoreImpl();
            Store stub = (Store) UnicastRemoteObject.exportObject(impl, 0);
            registry.rebind("store", stub);
            Store remote = (Store) LocateRegistry.getRegistry("127.0.0.1", port).lookup("store");
            for (int i = 0; i < 300 * w.scale; i++) {
                remote.get(32 * 1024);
                remote.put(new byte[16 * 1024]);
                if (i % 10 == 0) remote.table(2000);
            }
            UnicastRemoteObject.unexportObject(impl, true);
            UnicastRemoteObject.unexportObject(registry, true);
        });
        w.phase("images", () -> {
            BufferedImage img = new BufferedImage(800, 600, BufferedImage.TYPE_INT_RGB);
            for (int y = 0; y < 600; y++) for (int x = 0; x < 800; x++) img.setRGB(x, y, (x * 31 + y * 17) ^ (x * y));
            for (String fmt : new String[] {"png", "bmp", "jpg", "gif"}) {
                File f = w.dir.resolve("img." + fmt).toFile();
                for (int r = 0; r < 3; r++) {
                    javax.imageio.ImageIO.write(img, fmt, f);
                    javax.imageio.ImageIO.read(f);
                }
            }
        });
        w.phase("urls", () -> {
            Path p = w.dir.resolve("u.txt");
            Files.write(p, new byte[4 << 20]);
            for (int r = 0; r < 20; r++) try (InputStream in = p.toUri().toURL().openStream()) { in.readAllBytes(); }
            Path jar = w.dir.resolve("u.jar");
            try (java.util.jar.JarOutputStream out = new java.util.jar.JarOutputStream(new FileOutputStream(jar.toFile()))) {
                for (int i = 0; i < 50; i++) { out.putNextEntry(new java.util.zip.ZipEntry("r/e" + i)); out.write(w.text(50_000)); }
            }
            for (int r = 0; r < 5; r++) for (int i = 0; i < 50; i++) {
                java.net.JarURLConnection c = (java.net.JarURLConnection) new URL("jar:" + jar.toUri() + "!/r/e" + i).openConnection();
                c.setUseCaches(false);
                try (InputStream in = c.getInputStream()) { in.readAllBytes(); }
            }
            try (java.net.URLClassLoader cl = new java.net.URLClassLoader(new URL[] {jar.toUri().toURL()})) {
                for (int i = 0; i < 50; i++) try (InputStream in = cl.getResourceAsStream("r/e" + i)) { in.readAllBytes(); }
            }
        });
        w.phase("prefs", () -> {
            System.setProperty("java.util.prefs.userRoot", w.dir.resolve("prefs").toString());
            Preferences node = Preferences.userRoot().node("cpwork");
            for (int r = 0; r < 20; r++) {
                for (int i = 0; i < 200; i++) node.put("k" + i, "value " + r + " " + i);
                node.flush();
                node.sync();
            }
            node.removeNode();
        });
        w.phase("watch", () -> {
            Path d = Files.createDirectories(w.dir.resolve("watched"));
            try (WatchService ws = FileSystems.getDefault().newWatchService()) {
                d.register(ws, StandardWatchEventKinds.ENTRY_CREATE, StandardWatchEventKinds.ENTRY_MODIFY);
                Thread writer = new Thread(() -> {
                    try { for (int i = 0; i < 100; i++) { Files.write(d.resolve("f" + i), new byte[100]); Thread.sleep(5); } } catch (Exception e) { }
                });
                writer.start();
                int seen = 0;
                while (seen < 100) {
                    WatchKey k = ws.poll(2, TimeUnit.SECONDS);
                    if (k == null) break;
                    seen += k.pollEvents().size();
                    k.reset();
                }
                writer.join();
            }
            try (DirectoryStream<Path> ds = Files.newDirectoryStream(d)) { for (Path p : ds) Files.readAttributes(p, "posix:*"); }
            for (FileStore fs : FileSystems.getDefault().getFileStores()) { fs.getTotalSpace(); fs.getUsableSpace(); }
        });
    }
}
