package cpwork;

import java.io.BufferedWriter;
import java.io.OutputStreamWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import jdk.jfr.consumer.RecordedEvent;
import jdk.jfr.consumer.RecordedFrame;
import jdk.jfr.consumer.RecordedMethod;
import jdk.jfr.consumer.RecordedThread;
import jdk.jfr.consumer.RecordingFile;

/**
 * Converts a JFR recording into compact JSON lines for crystalperf.models.measure.jvm: each distinct
 * frame once ({"f": id, ...}), then one line per event with its frame ids, top first. `jfr print --json`
 * writes every frame of every event in full (about 1 kB a frame), which is gigabytes for a recording
 * with 100k I/O events; this is a few megabytes.
 */
public final class JfrLines {
    private static String quote(String s) {
        if (s == null) return "null";
        StringBuilder b = new StringBuilder(s.length() + 2).append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    public static void main(String[] args) throws Exception {
        Map<String, Integer> frameIds = new HashMap<>();
        BufferedWriter out = new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8), 1 << 16);
        try (RecordingFile file = new RecordingFile(Path.of(args[0]))) {
            while (file.hasMoreEvents()) {
                RecordedEvent event = file.readEvent();
                if (event.getStackTrace() == null) continue;
                List<RecordedFrame> frames = event.getStackTrace().getFrames();
                StringBuilder ids = new StringBuilder();
                for (RecordedFrame frame : frames) {
                    if (!frame.isJavaFrame()) continue;
                    RecordedMethod method = frame.getMethod();
                    String cls = method.getType().getName();
                    String module = null;
                    try {
                        Object pkg = method.getType().getValue("package");
                        if (pkg instanceof jdk.jfr.consumer.RecordedObject) {
                            Object mod = ((jdk.jfr.consumer.RecordedObject) pkg).getValue("module");
                            if (mod instanceof jdk.jfr.consumer.RecordedObject) {
                                module = ((jdk.jfr.consumer.RecordedObject) mod).getString("name");
                            }
                        }
                    } catch (RuntimeException ignored) {
                        module = null;
                    }
                    String key = cls + " " + method.getName() + " " + method.getDescriptor() + " " + frame.getLineNumber();
                    Integer id = frameIds.get(key);
                    if (id == null) {
                        id = frameIds.size();
                        frameIds.put(key, id);
                        out.write("{\"f\":" + id + ",\"c\":" + quote(cls) + ",\"m\":" + quote(method.getName())
                                + ",\"d\":" + quote(method.getDescriptor()) + ",\"l\":" + frame.getLineNumber()
                                + ",\"mod\":" + quote(module) + ",\"h\":" + method.isHidden() + "}\n");
                    }
                    if (ids.length() > 0) ids.append(',');
                    ids.append(id);
                }
                RecordedThread thread = event.hasField("sampledThread") ? event.getThread("sampledThread") : event.getThread();
                long tid = thread == null ? -1 : thread.getJavaThreadId();
                long start = event.getStartTime().getEpochSecond() * 1_000_000_000L + event.getStartTime().getNano();
                out.write("{\"e\":" + quote(event.getEventType().getName()) + ",\"t\":" + start + ",\"d\":"
                        + event.getDuration().toNanos() + ",\"th\":" + tid + ",\"s\":[" + ids + "]}\n");
            }
        }
        out.flush();
    }
}
