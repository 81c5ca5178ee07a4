package cpwork;

import java.io.*;
import java.nio.ByteBuffer;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.util.*;
import java.util.logging.FileHandler;
import java.util.logging.Logger;
import java.util.logging.SimpleFormatter;
import java.util.stream.Stream;

/** File I/O through java.io, java.nio and the JDK APIs that sit on files. */
public final class JdkFiles {
    public static void main(String[] args) throws Exception {
        Work w = new Work(args);
        int mb = 8 * w.scale;
        byte[] block = w.bytes(1 << 20);
        Path big = w.dir.resolve("big.bin");
        w.phase("streams", () -> {
            for (int r = 0; r < 3; r++) {
                try (FileOutputStream out = new FileOutputStream(big.toFile())) {
                    for (int i = 0; i < mb; i++) out.write(block);
                    out.getFD().sync();
                }
                try (FileInputStream in = new FileInputStream(big.toFile())) {
                    byte[] buf = new byte[65536];
                    while (in.read(buf) > 0) { }
                }
                try (BufferedInputStream in = new BufferedInputStream(new FileInputStream(big.toFile()))) {
                    while (in.read() >= 0 && in.available() > (mb - 1) << 20) { }
                    in.transferTo(OutputStream.nullOutputStream());
                }
                try (BufferedOutputStream out = new BufferedOutputStream(new FileOutputStream(w.dir.resolve("b2").toFile()))) {
                    for (int i = 0; i < 200_000; i++) out.write(i);
                }
            }
        });
        w.phase("random-access", () -> {
            try (RandomAccessFile raf = new RandomAccessFile(big.toFile(), "rw")) {
                byte[] buf = new byte[4096];
                for (int i = 0; i < 20_000; i++) {
                    raf.seek((long) w.random.nextInt(mb << 8) << 12);
                    raf.readFully(buf);
                    if (i % 4 == 0) { raf.seek((long) w.random.nextInt(mb << 8) << 12); raf.write(buf); }
                }
                raf.getFD().sync();
                for (int i = 0; i < 2_000; i++) { raf.seek(i * 8L); raf.writeLong(i); raf.seek(i * 8L); raf.readLong(); }
            }
        });
        w.phase("data-streams", () -> {
            File f = w.dir.resolve("data.bin").toFile();
            for (int r = 0; r < 3; r++) {
                try (DataOutputStream out = new DataOutputStream(new FileOutputStream(f))) {
                    for (int i = 0; i < 20_000; i++) { out.writeInt(i); out.writeUTF("k" + i); }
                }
                try (DataInputStream in = new DataInputStream(new FileInputStream(f))) {
                    for (int i = 0; i < 20_000; i++) { in.readInt(); in.readUTF(); }
                }
            }
        });
        w.phase("readers-writers", () -> {
            File f = w.dir.resolve("text.txt").toFile();
            for (int r = 0; r < 3; r++) {
                try (PrintWriter out = new PrintWriter(new FileWriter(f))) {
                    for (int i = 0; i < 200_000; i++) out.println("line " + i + " of the text file");
                }
                try (BufferedReader in = new BufferedReader(new FileReader(f))) {
                    while (in.readLine() != null) { }
                }
                try (Scanner sc = new Scanner(f)) { while (sc.hasNextLine()) sc.nextLine(); }
                try (LineNumberReader in = new LineNumberReader(new InputStreamReader(new FileInputStream(f), StandardCharsets.UTF_8))) {
                    while (in.readLine() != null) { }
                }
            }
        });
        w.phase("nio-files", () -> {
            for (int r = 0; r < 3; r++) {
                Path p = w.dir.resolve("nio.bin");
                Files.write(p, block);
                for (int i = 0; i < mb; i++) Files.write(p, block, StandardOpenOption.APPEND);
                Files.readAllBytes(p);
                Path t = w.dir.resolve("nio.txt");
                List<String> lines = new ArrayList<>();
                for (int i = 0; i < 100_000; i++) lines.add("row " + i);
                Files.write(t, lines);
                Files.readAllLines(t);
                try (Stream<String> s = Files.lines(t)) { s.count(); }
                try (BufferedWriter out = Files.newBufferedWriter(t)) { for (String l : lines) { out.write(l); out.newLine(); } }
                try (BufferedReader in = Files.newBufferedReader(t)) { while (in.readLine() != null) { } }
                Files.writeString(t, String.join("\n", lines));
                Files.readString(t);
                try (InputStream in = Files.newInputStream(p)) { in.readAllBytes(); }
                try (OutputStream out = Files.newOutputStream(w.dir.resolve("nio2.bin"))) { out.write(block); }
                Files.copy(p, w.dir.resolve("copy.bin"), StandardCopyOption.REPLACE_EXISTING);
                Files.move(w.dir.resolve("copy.bin"), w.dir.resolve("moved.bin"), StandardCopyOption.REPLACE_EXISTING);
                Files.delete(w.dir.resolve("moved.bin"));
            }
        });
        w.phase("tree", () -> {
            for (int r = 0; r < 3; r++) {
                Path root = w.dir.resolve("tree" + r);
                for (int d = 0; d < 30; d++) {
                    Path sub = Files.createDirectories(root.resolve("d" + d).resolve("e"));
                    for (int f = 0; f < 30; f++) Files.write(sub.resolve("f" + f + ".txt"), ("file " + f).getBytes());
                }
                try (Stream<Path> s = Files.walk(root)) { s.filter(Files::isRegularFile).forEach(p -> { try { Files.size(p); Files.getLastModifiedTime(p); } catch (IOException e) { throw new UncheckedIOException(e); } }); }
                try (Stream<Path> s = Files.find(root, 5, (p, a) -> a.isRegularFile())) { s.count(); }
                Files.walkFileTree(root, new SimpleFileVisitor<Path>() {
                    @Override public FileVisitResult visitFile(Path file, java.nio.file.attribute.BasicFileAttributes a) throws IOException { Files.delete(file); return FileVisitResult.CONTINUE; }
                    @Override public FileVisitResult postVisitDirectory(Path dir, IOException e) throws IOException { Files.delete(dir); return FileVisitResult.CONTINUE; }
                });
                File legacy = w.dir.resolve("legacy").toFile();
                legacy.mkdirs();
                for (int f = 0; f < 500; f++) { File x = new File(legacy, "x" + f); x.createNewFile(); x.exists(); x.length(); x.isFile(); }
                for (File x : legacy.listFiles()) x.delete();
                for (int f = 0; f < 300; f++) { File t = File.createTempFile("cpw", ".tmp", legacy); t.delete(); }
            }
        });
        w.phase("channels", () -> {
            for (int r = 0; r < 3; r++) {
                Path p = w.dir.resolve("chan.bin");
                try (FileChannel ch = FileChannel.open(p, StandardOpenOption.CREATE, StandardOpenOption.WRITE, StandardOpenOption.READ, StandardOpenOption.TRUNCATE_EXISTING)) {
                    ByteBuffer buf = ByteBuffer.wrap(block);
                    for (int i = 0; i < mb; i++) { buf.rewind(); ch.write(buf); }
                    ch.force(true);
                    ByteBuffer in = ByteBuffer.allocateDirect(1 << 16);
                    ch.position(0);
                    while (ch.read(in) > 0) in.clear();
                    for (int i = 0; i < 5000; i++) { in.clear(); ch.read(in, (long) w.random.nextInt(mb) << 20); }
                    try (FileChannel dst = FileChannel.open(w.dir.resolve("chan2.bin"), StandardOpenOption.CREATE, StandardOpenOption.WRITE)) {
                        ch.transferTo(0, ch.size(), dst);
                        dst.force(false);
                    }
                    MappedByteBuffer map = ch.map(FileChannel.MapMode.READ_WRITE, 0, ch.size());
                    long sum = 0;
                    for (int i = 0; i < map.limit(); i += 64) { sum += map.get(i); map.put(i, (byte) sum); }
                    map.force();
                }
                try (FileChannel ch = FileChannel.open(p, StandardOpenOption.READ, StandardOpenOption.WRITE);
                     java.nio.channels.FileLock lock = ch.lock()) { ch.size(); }
            }
        });
        w.phase("objects", () -> {
            Map<String, List<Integer>> obj = new HashMap<>();
            for (int i = 0; i < 20_000; i++) obj.put("k" + i, List.of(i, i + 1));
            File f = w.dir.resolve("obj.ser").toFile();
            for (int r = 0; r < 3; r++) {
                try (ObjectOutputStream out = new ObjectOutputStream(new BufferedOutputStream(new FileOutputStream(f)))) { out.writeObject(new HashMap<>(obj)); }
                try (ObjectInputStream in = new ObjectInputStream(new BufferedInputStream(new FileInputStream(f)))) { in.readObject(); }
            }
            Properties props = new Properties();
            for (int i = 0; i < 5000; i++) props.setProperty("key." + i, "value " + i);
            for (int r = 0; r < 5; r++) {
                try (OutputStream out = new FileOutputStream(w.dir.resolve("p.properties").toFile())) { props.store(out, "x"); }
                try (InputStream in = new FileInputStream(w.dir.resolve("p.properties").toFile())) { new Properties().load(in); }
                try (OutputStream out = new FileOutputStream(w.dir.resolve("p.xml").toFile())) { props.storeToXML(out, "x"); }
            }
        });
        w.phase("logging", () -> {
            Logger log = Logger.getLogger("cpwork.files");
            log.setUseParentHandlers(false);
            FileHandler h = new FileHandler(w.dir.resolve("log%g.txt").toString(), 1 << 20, 3);
            h.setFormatter(new SimpleFormatter());
            log.addHandler(h);
            for (int i = 0; i < 20_000; i++) log.info("message " + i);
            h.close();
        });
    }
}
