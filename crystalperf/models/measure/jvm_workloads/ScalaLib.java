package cpwork;

import java.io.*;
import java.nio.file.*;
import java.util.ArrayList;
import java.util.List;

/** The Scala standard library driven from Java: collections (CPU), scala.io.Source on files (disk),
 * Futures and Await (waiting). */
public final class ScalaLib {
    static volatile Object sink;

    public static void main(String[] args) throws Exception {
        Work w = new Work(args);
        w.phase("collections", () -> {
            List<Integer> java = new ArrayList<>();
            for (int i = 0; i < 200_000 * w.scale; i++) java.add(w.random.nextInt(1_000_000));
            for (int r = 0; r < 10; r++) {
                scala.collection.immutable.List<Integer> list = scala.jdk.javaapi.CollectionConverters.asScala(java).toList();
                scala.collection.immutable.Vector<Integer> vec = scala.jdk.javaapi.CollectionConverters.asScala(java).toVector();
                sink = list.reverse().take(1000).length();
                sink = vec.length() + vec.apply(5); sink = vec.reverse();
                scala.collection.immutable.List<?> sorted = (scala.collection.immutable.List<?>) list.sorted(scala.math.Ordering.comparatorToOrdering(Integer::compare));
                sink = sorted.mkString(",").length();
                sink = ((scala.collection.immutable.List<?>) list.distinct()).size();
                sink = list.groupBy(x -> x % 100).size();
                scala.collection.mutable.HashMap<Integer, Integer> hm = new scala.collection.mutable.HashMap<>();
                for (Integer x : java) hm.put(x % 5000, x);
                sink = hm.size();
                scala.collection.immutable.Map<Integer, Integer> im = hm.toMap(scala.$less$colon$less$.MODULE$.refl());
                sink = im.size();
                scala.collection.mutable.ArrayBuffer<Integer> ab = new scala.collection.mutable.ArrayBuffer<>();
                for (Integer x : java) ab.addOne(x);
                sink = ((scala.collection.mutable.ArrayBuffer<?>) ab.slice(10, 10_000)).toList().zipWithIndex();
                sink = scala.util.hashing.MurmurHash3.seqHash(list);
                sink = scala.collection.StringOps$.MODULE$.split$extension("a,b,c".repeat(20_000), ',').length;
                sink = scala.math.BigInt.apply(3).pow(20_000).toString().length();
            }
        });
        w.phase("io-source", () -> {
            Path p = w.dir.resolve("scala.txt");
            List<String> lines = new ArrayList<>();
            for (int i = 0; i < 200_000; i++) lines.add("line number " + i + " with some text");
            Files.write(p, lines);
            for (int r = 0; r < 5; r++) {
                scala.io.BufferedSource src = scala.io.Source.fromFile(p.toFile(), "UTF-8");
                try { scala.collection.Iterator<String> it = src.getLines(); while (it.hasNext()) sink = it.next(); } finally { src.close(); }
                scala.io.BufferedSource again = scala.io.Source.fromFile(p.toString(), scala.io.Codec.UTF8());
                try { sink = again.mkString().length(); } finally { again.close(); }
                scala.io.BufferedSource in = scala.io.Source.fromInputStream(new FileInputStream(p.toFile()), scala.io.Codec.UTF8());
                try { sink = in.getLines().size(); } finally { in.close(); }
            }
        });
        w.phase("futures", () -> {
            scala.concurrent.ExecutionContext ec = scala.concurrent.ExecutionContext.global();
            for (int r = 0; r < 300; r++) {
                scala.concurrent.Future<Integer> f = scala.concurrent.Future.apply(() -> { try { Thread.sleep(2); } catch (InterruptedException e) { } return 1; }, ec);
                sink = scala.concurrent.Await.result(f, scala.concurrent.duration.Duration.apply(10, "s"));
                scala.concurrent.Promise<Integer> pr = scala.concurrent.Promise.apply();
                new Thread(() -> { try { Thread.sleep(1); } catch (InterruptedException e) { } pr.success(2); }).start();
                sink = scala.concurrent.Await.result(pr.future(), scala.concurrent.duration.Duration.apply(10, "s"));
            }
        });
    }
}
