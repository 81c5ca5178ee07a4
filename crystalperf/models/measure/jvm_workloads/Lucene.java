package cpwork;

import java.nio.file.Path;
import org.apache.lucene.analysis.standard.StandardAnalyzer;
import org.apache.lucene.document.*;
import org.apache.lucene.index.*;
import org.apache.lucene.queryparser.classic.QueryParser;
import org.apache.lucene.search.*;
import org.apache.lucene.store.*;

/** Apache Lucene: an index on disk (NIOFSDirectory, so reads are timed file reads), commits, merges,
 * searches. */
public final class Lucene {
    public static void main(String[] args) throws Exception {
        Work w = new Work(args);
        String[] words = new String(w.text(1 << 20)).split(" ");
        Path dir = w.dir.resolve("index");
        w.phase("index", () -> {
            try (Directory d = new NIOFSDirectory(dir); IndexWriter iw = new IndexWriter(d, new IndexWriterConfig(new StandardAnalyzer()).setRAMBufferSizeMB(4))) {
                for (int i = 0; i < 60_000 * w.scale; i++) {
                    Document doc = new Document();
                    doc.add(new StringField("id", "d" + i, Field.Store.YES));
                    StringBuilder sb = new StringBuilder();
                    for (int k = 0; k < 30; k++) sb.append(words[(i * 31 + k * 7) % words.length]).append(i % 97).append(' ');
                    doc.add(new TextField("body", sb.toString(), Field.Store.YES));
                    doc.add(new NumericDocValuesField("n", i));
                    iw.addDocument(doc);
                    if (i % 20_000 == 19_999) iw.commit();
                }
                iw.forceMerge(1);
                iw.commit();
            }
        });
        w.phase("search", () -> {
            try (Directory d = new NIOFSDirectory(dir); DirectoryReader r = DirectoryReader.open(d)) {
                IndexSearcher s = new IndexSearcher(r);
                QueryParser qp = new QueryParser("body", new StandardAnalyzer());
                for (int i = 0; i < 2000; i++) {
                    TopDocs top = s.search(qp.parse(words[i % words.length] + (i % 97) + " OR gamma" + (i % 13)), 20);
                    for (ScoreDoc sd : top.scoreDocs) s.doc(sd.doc);
                }
                s.search(new MatchAllDocsQuery(), 10, new Sort(new SortField("n", SortField.Type.LONG, true)));
            }
        });
    }
}
