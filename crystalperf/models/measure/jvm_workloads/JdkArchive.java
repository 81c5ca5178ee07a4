package cpwork;

import java.io.*;
import java.nio.file.*;
import java.util.Enumeration;
import java.util.jar.*;
import java.util.zip.*;

/** zip, gzip and jar files on disk, and the codecs in memory (CPU). */
public final class JdkArchive {
    public static void main(String[] args) throws Exception {
        Work w = new Work(args);
        byte[] text = w.text(1 << 20);
        w.phase("zip", () -> {
            for (int r = 0; r < 3; r++) {
                File z = w.dir.resolve("a.zip").toFile();
                try (ZipOutputStream out = new ZipOutputStream(new FileOutputStream(z))) {
                    for (int i = 0; i < 40 * w.scale; i++) { out.putNextEntry(new ZipEntry("e" + i + ".txt")); out.write(text, 0, 200_000); out.closeEntry(); }
                }
                try (ZipInputStream in = new ZipInputStream(new FileInputStream(z))) {
                    byte[] buf = new byte[8192];
                    while (in.getNextEntry() != null) { while (in.read(buf) > 0) { } }
                }
                try (ZipFile zf = new ZipFile(z)) {
                    Enumeration<? extends ZipEntry> e = zf.entries();
                    while (e.hasMoreElements()) { try (InputStream in = zf.getInputStream(e.nextElement())) { in.readAllBytes(); } }
                }
                try (FileSystem fs = FileSystems.newFileSystem(z.toPath())) {
                    for (Path p : fs.getRootDirectories()) try (var s = Files.walk(p)) { s.filter(Files::isRegularFile).forEach(x -> { try { Files.readAllBytes(x); } catch (IOException ex) { throw new UncheckedIOException(ex); } }); }
                }
            }
        });
        w.phase("gzip", () -> {
            File g = w.dir.resolve("a.gz").toFile();
            for (int r = 0; r < 3; r++) {
                try (GZIPOutputStream out = new GZIPOutputStream(new FileOutputStream(g))) { for (int i = 0; i < 8 * w.scale; i++) out.write(text); }
                try (GZIPInputStream in = new GZIPInputStream(new FileInputStream(g))) { in.readAllBytes(); }
                try (DeflaterOutputStream out = new DeflaterOutputStream(new FileOutputStream(w.dir.resolve("a.z").toFile()))) { out.write(text); }
                try (InflaterInputStream in = new InflaterInputStream(new FileInputStream(w.dir.resolve("a.z").toFile()))) { in.readAllBytes(); }
            }
        });
        w.phase("jar", () -> {
            File j = w.dir.resolve("a.jar").toFile();
            Manifest m = new Manifest();
            m.getMainAttributes().put(Attributes.Name.MANIFEST_VERSION, "1.0");
            for (int r = 0; r < 3; r++) {
                try (JarOutputStream out = new JarOutputStream(new FileOutputStream(j), m)) {
                    for (int i = 0; i < 200; i++) { out.putNextEntry(new JarEntry("p/C" + i + ".class")); out.write(text, i, 20_000); out.closeEntry(); }
                }
                try (JarFile jf = new JarFile(j)) {
                    jf.getManifest();
                    Enumeration<JarEntry> e = jf.entries();
                    while (e.hasMoreElements()) { try (InputStream in = jf.getInputStream(e.nextElement())) { in.readAllBytes(); } }
                }
                try (JarInputStream in = new JarInputStream(new FileInputStream(j))) { while (in.getNextJarEntry() != null) in.readAllBytes(); }
            }
        });
        w.phase("codecs-memory", () -> {
            byte[] out = new byte[text.length * 2];
            for (int r = 0; r < 40 * w.scale; r++) {
                Deflater d = new Deflater(r % 9 + 1);
                d.setInput(text); d.finish();
                int n = d.deflate(out); d.end();
                Inflater inf = new Inflater();
                inf.setInput(out, 0, n);
                byte[] back = new byte[text.length];
                inf.inflate(back); inf.end();
                CRC32 crc = new CRC32(); crc.update(back);
                Adler32 ad = new Adler32(); ad.update(back);
                CRC32C c = new CRC32C(); c.update(back);
                ByteArrayOutputStream bo = new ByteArrayOutputStream();
                try (GZIPOutputStream g = new GZIPOutputStream(bo)) { g.write(text); }
                try (GZIPInputStream g = new GZIPInputStream(new ByteArrayInputStream(bo.toByteArray()))) { g.readAllBytes(); }
            }
        });
    }
}
