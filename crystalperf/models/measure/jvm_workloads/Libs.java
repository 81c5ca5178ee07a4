package cpwork;

import java.io.*;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.util.*;

/** Debian-packaged Java libraries on files and in memory: commons-io/-compress/-codec/-lang3, xz,
 * snappy, zstd, guava, jackson. */
public final class Libs {
    static volatile Object sink;

    public static void main(String[] args) throws Exception {
        Work w = new Work(args);
        byte[] text = w.text(1 << 20);
        int n = 8 * w.scale;
        w.phase("commons-io", () -> {
            File src = w.dir.resolve("cio.txt").toFile();
            for (int r = 0; r < 3; r++) {
                org.apache.commons.io.FileUtils.writeByteArrayToFile(src, text);
                for (int i = 0; i < n; i++) org.apache.commons.io.FileUtils.writeByteArrayToFile(src, text, true);
                org.apache.commons.io.FileUtils.readFileToByteArray(src);
                org.apache.commons.io.FileUtils.readLines(src, StandardCharsets.UTF_8);
                org.apache.commons.io.FileUtils.copyFile(src, w.dir.resolve("cio2.txt").toFile());
                File d = w.dir.resolve("ciodir").toFile();
                for (int i = 0; i < 100; i++) org.apache.commons.io.FileUtils.writeStringToFile(new File(d, "f" + i), "x" + i, StandardCharsets.UTF_8);
                org.apache.commons.io.FileUtils.copyDirectory(d, w.dir.resolve("ciodir2").toFile());
                org.apache.commons.io.FileUtils.sizeOfDirectory(d);
                org.apache.commons.io.FileUtils.listFiles(d, null, true);
                org.apache.commons.io.FileUtils.deleteDirectory(w.dir.resolve("ciodir2").toFile());
                try (InputStream in = new FileInputStream(src)) { org.apache.commons.io.IOUtils.toByteArray(in); }
                try (InputStream in = new FileInputStream(src); OutputStream out = new FileOutputStream(w.dir.resolve("cio3").toFile())) { org.apache.commons.io.IOUtils.copyLarge(in, out); }
                try (org.apache.commons.io.LineIterator it = org.apache.commons.io.FileUtils.lineIterator(src, "UTF-8")) { while (it.hasNext()) it.next(); }
                org.apache.commons.io.FileUtils.contentEquals(src, w.dir.resolve("cio2.txt").toFile());
                org.apache.commons.io.FileUtils.checksumCRC32(src);
            }
        });
        w.phase("commons-compress", () -> {
            for (int r = 0; r < 3; r++) {
                File tar = w.dir.resolve("a.tar").toFile();
                try (org.apache.commons.compress.archivers.tar.TarArchiveOutputStream out = new org.apache.commons.compress.archivers.tar.TarArchiveOutputStream(new FileOutputStream(tar))) {
                    for (int i = 0; i < 40; i++) { org.apache.commons.compress.archivers.tar.TarArchiveEntry e = new org.apache.commons.compress.archivers.tar.TarArchiveEntry("e" + i); e.setSize(200_000); out.putArchiveEntry(e); out.write(text, 0, 200_000); out.closeArchiveEntry(); }
                }
                try (org.apache.commons.compress.archivers.tar.TarArchiveInputStream in = new org.apache.commons.compress.archivers.tar.TarArchiveInputStream(new FileInputStream(tar))) { while (in.getNextTarEntry() != null) in.readAllBytes(); }
                try (OutputStream out = new org.apache.commons.compress.compressors.bzip2.BZip2CompressorOutputStream(new FileOutputStream(w.dir.resolve("a.bz2").toFile()))) { out.write(text); }
                try (InputStream in = new org.apache.commons.compress.compressors.bzip2.BZip2CompressorInputStream(new FileInputStream(w.dir.resolve("a.bz2").toFile()))) { in.readAllBytes(); }
                try (OutputStream out = new org.apache.commons.compress.compressors.gzip.GzipCompressorOutputStream(new FileOutputStream(w.dir.resolve("c.gz").toFile()))) { for (int i = 0; i < n; i++) out.write(text); }
                try (InputStream in = new org.apache.commons.compress.compressors.gzip.GzipCompressorInputStream(new FileInputStream(w.dir.resolve("c.gz").toFile()))) { in.readAllBytes(); }
                File zip = w.dir.resolve("c.zip").toFile();
                try (org.apache.commons.compress.archivers.zip.ZipArchiveOutputStream out = new org.apache.commons.compress.archivers.zip.ZipArchiveOutputStream(zip)) {
                    for (int i = 0; i < 30; i++) { out.putArchiveEntry(new org.apache.commons.compress.archivers.zip.ZipArchiveEntry("z" + i)); out.write(text, 0, 100_000); out.closeArchiveEntry(); }
                }
                try (org.apache.commons.compress.archivers.zip.ZipFile zf = new org.apache.commons.compress.archivers.zip.ZipFile(zip)) {
                    for (Enumeration<org.apache.commons.compress.archivers.zip.ZipArchiveEntry> e = zf.getEntries(); e.hasMoreElements(); ) try (InputStream in = zf.getInputStream(e.nextElement())) { in.readAllBytes(); }
                }
            }
        });
        w.phase("xz", () -> {
            for (int r = 0; r < 2; r++) {
                try (org.tukaani.xz.XZOutputStream out = new org.tukaani.xz.XZOutputStream(new FileOutputStream(w.dir.resolve("a.xz").toFile()), new org.tukaani.xz.LZMA2Options(3))) { out.write(text); }
                try (org.tukaani.xz.XZInputStream in = new org.tukaani.xz.XZInputStream(new FileInputStream(w.dir.resolve("a.xz").toFile()))) { in.readAllBytes(); }
            }
        });
        w.phase("snappy-zstd", () -> {
            for (int r = 0; r < 20 * w.scale; r++) {
                byte[] c = org.xerial.snappy.Snappy.compress(text);
                sink = org.xerial.snappy.Snappy.uncompress(c);
                byte[] z = com.github.luben.zstd.Zstd.compress(text, 3);
                sink = com.github.luben.zstd.Zstd.decompress(z, text.length);
            }
            try (OutputStream out = new org.xerial.snappy.SnappyOutputStream(new FileOutputStream(w.dir.resolve("a.snappy").toFile()))) { for (int i = 0; i < n; i++) out.write(text); }
            try (InputStream in = new org.xerial.snappy.SnappyInputStream(new FileInputStream(w.dir.resolve("a.snappy").toFile()))) { in.readAllBytes(); }
            try (OutputStream out = new com.github.luben.zstd.ZstdOutputStream(new FileOutputStream(w.dir.resolve("a.zst").toFile()))) { for (int i = 0; i < n; i++) out.write(text); }
            try (InputStream in = new com.github.luben.zstd.ZstdInputStream(new FileInputStream(w.dir.resolve("a.zst").toFile()))) { in.readAllBytes(); }
        });
        w.phase("codec-lang3", () -> {
            for (int r = 0; r < 20 * w.scale; r++) {
                sink = org.apache.commons.codec.binary.Hex.encodeHexString(text);
                sink = org.apache.commons.codec.binary.Base64.encodeBase64(text);
                sink = org.apache.commons.codec.binary.Base64.decodeBase64((byte[]) sink);
                sink = org.apache.commons.codec.digest.DigestUtils.sha256Hex(text);
                sink = org.apache.commons.codec.digest.DigestUtils.md5Hex(text);
                sink = org.apache.commons.codec.digest.MurmurHash3.hash128(text);
                String s = new String(text, 0, 100_000, StandardCharsets.US_ASCII);
                sink = org.apache.commons.lang3.StringUtils.countMatches(s, "eta");
                sink = org.apache.commons.lang3.StringUtils.replace(s, "alpha", "ALPHA");
                sink = org.apache.commons.lang3.StringUtils.split(s, ' ');
                sink = org.apache.commons.lang3.StringEscapeUtils.escapeHtml4(s);
                sink = org.apache.commons.lang3.RandomStringUtils.randomAlphanumeric(10_000);
            }
            try (InputStream in = new FileInputStream(w.dir.resolve("cio.txt").toFile())) { sink = org.apache.commons.codec.digest.DigestUtils.sha1Hex(in); } catch (FileNotFoundException e) { }
        });
        w.phase("guava", () -> {
            File f = w.dir.resolve("g.bin").toFile();
            for (int r = 0; r < 3; r++) {
                com.google.common.io.Files.write(text, f);
                for (int i = 0; i < n; i++) com.google.common.io.Files.asByteSink(f, com.google.common.io.FileWriteMode.APPEND).write(text);
                sink = com.google.common.io.Files.toByteArray(f);
                sink = com.google.common.io.Files.asCharSource(f, StandardCharsets.UTF_8).readLines();
                sink = com.google.common.io.Files.asByteSource(f).hash(com.google.common.hash.Hashing.sha256());
                com.google.common.io.Files.copy(f, w.dir.resolve("g2.bin").toFile());
            }
            for (int r = 0; r < 20 * w.scale; r++) {
                sink = com.google.common.hash.Hashing.murmur3_128().hashBytes(text);
                sink = com.google.common.hash.Hashing.crc32c().hashBytes(text);
                com.google.common.collect.Multimap<Integer, Integer> mm = com.google.common.collect.ArrayListMultimap.create();
                for (int i = 0; i < 50_000; i++) mm.put(i % 100, i);
                sink = com.google.common.collect.ImmutableSortedSet.copyOf(mm.values());
                sink = com.google.common.base.Splitter.on(' ').splitToList(new String(text, 0, 50_000, StandardCharsets.US_ASCII));
                com.google.common.cache.Cache<Integer, String> cache = com.google.common.cache.CacheBuilder.newBuilder().maximumSize(1000).build();
                for (int i = 0; i < 20_000; i++) cache.put(i, "v");
            }
        });
        w.phase("jackson", () -> {
            com.fasterxml.jackson.databind.ObjectMapper om = new com.fasterxml.jackson.databind.ObjectMapper();
            List<Map<String, Object>> rows = new ArrayList<>();
            for (int i = 0; i < 50_000; i++) rows.add(Map.of("id", i, "name", "n" + i, "v", i * 0.5, "tags", List.of("a", "b")));
            File f = w.dir.resolve("j.json").toFile();
            for (int r = 0; r < 3; r++) {
                om.writeValue(f, rows);
                sink = om.readValue(f, List.class);
                sink = om.readTree(f);
                byte[] b = om.writeValueAsBytes(rows);
                sink = om.readValue(b, List.class);
            }
        });
    }
}
