"""The Spark listener's own driver heap against the number of tasks: synthetic SparkListener events (executors
added, jobs and stages submitted and completed, task ends with realistic TaskInfo/TaskMetrics) and executor
sample batches driven through the real CrystalPerfListener and SampleStore in a JVM, heap used after a full GC
printed at each size (the hook's heap: used less what the JVM held before the listener was created).

``python bench/spark_memory.py [--tasks 10000 100000 1000000] [--xmx 512m]``

A small Java driver is compiled here into a temporary directory against pyspark's jars and the bundled
crystalperf-spark.jar (it is not part of the product jar), then run with ``java -cp ...``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

DRIVER = r"""
package org.crystalperf.spark;

import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.Random;

import org.apache.spark.SparkConf;
import org.apache.spark.executor.ExecutorMetrics;
import org.apache.spark.executor.TaskMetrics;
import org.apache.spark.scheduler.*;
import org.apache.spark.scheduler.cluster.ExecutorInfo;
import org.apache.spark.storage.RDDInfo;
import scala.jdk.javaapi.CollectionConverters;

public final class MemoryBench {
    static long usedAfterGc() throws Exception {
        long best = Long.MAX_VALUE;
        for (int i = 0; i < 4; i++) {
            System.gc();
            Thread.sleep(50);
            best = Math.min(best, ManagementFactory.getMemoryMXBean().getHeapMemoryUsage().getUsed());
        }
        return best;
    }

    static scala.collection.immutable.Seq<Object> ints(List<Object> l) {
        return CollectionConverters.asScala(l).toList();
    }

    public static void main(String[] args) throws Exception {
        long total = Long.parseLong(args[0]);
        int perStage = Integer.parseInt(args[1]);
        String out = args[2];
        SparkConf conf = new SparkConf(false).set("spark.master", "local[8]").set("spark.app.id", "bench")
                .set("spark.crystalperf.ioCounters", "false").set("spark.crystalperf.outputDir", out)
                .set("spark.crystalperf.python", "/bin/true");
        new TaskMetrics();  // load the classes before the baseline
        long base = usedAfterGc();
        CrystalPerfListener listener = new CrystalPerfListener(conf);
        Random rnd = new Random(1);
        scala.collection.immutable.Map<String, String> none = scala.collection.immutable.Map$.MODULE$.empty();
        for (int e = 0; e < 50; e++) {
            listener.onExecutorAdded(new SparkListenerExecutorAdded(0L, Integer.toString(e),
                    new ExecutorInfo("host-" + (e % 10), 8, none)));
        }
        // frames and stacks the samplers would send: 4,000 frames, 2,000 stacks of 40 frames
        String[] framePool = new String[4000];
        for (int f = 0; f < framePool.length; f++) {
            framePool[f] = "org.example.pkg" + (f % 40) + ".SomeClass" + f + "\u0002method" + (f % 7) + "\u0002SomeClass"
                    + f + ".java\u0002" + (100 + f % 300) + "\u0002/opt/spark/jars/some-library-1.2.3.jar";
        }
        int[][] stackPool = new int[2000][40];
        for (int[] s : stackPool) {
            for (int i = 0; i < s.length; i++) {
                s[i] = rnd.nextInt(framePool.length);
            }
        }
        long t0 = System.nanoTime();
        long taskId = 0;
        int stageId = 0;
        int jobId = 0;
        long now = 1_700_000_000_000L;
        long[] checkpoints = {10_000, 100_000, 1_000_000, 10_000_000};
        int next = 0;
        while (taskId < total) {
            int n = (int) Math.min(perStage, total - taskId);
            List<Object> noParents = new ArrayList<>();
            List<RDDInfo> rdds = new ArrayList<>();
            StageInfo si = new StageInfo(stageId, 0, "map at job.py:" + stageId, n,
                    CollectionConverters.asScala(rdds).toList(), ints(noParents), "map at job.py:12\nat x", null,
                    CollectionConverters.asScala(new ArrayList<scala.collection.immutable.Seq<TaskLocation>>()).toList(),
                    scala.Option.empty(), 0, false, 0);
            si.submissionTime_$eq(scala.Option.apply((Object) now));
            List<StageInfo> infos = new ArrayList<>();
            infos.add(si);
            Properties props = new Properties();
            props.setProperty("callSite.short", "count at job.py:" + jobId);
            listener.onJobStart(new SparkListenerJobStart(jobId, now, CollectionConverters.asScala(infos).toList(), props));
            listener.onStageSubmitted(new SparkListenerStageSubmitted(si, props));
            for (int i = 0; i < n; i++, taskId++) {
                String exec = Integer.toString((int) (taskId % 50));
                TaskInfo ti = new TaskInfo(taskId, i, 0, i, now, exec, "host-" + (taskId % 10),
                        TaskLocality.PROCESS_LOCAL(), false);
                now += 1;
                ti.markFinished(org.apache.spark.TaskState.FINISHED(), now + 200 + rnd.nextInt(500));
                TaskMetrics m = new TaskMetrics();
                m.setExecutorRunTime(200 + rnd.nextInt(500));
                m.setExecutorCpuTime((150 + rnd.nextInt(400)) * 1_000_000L);
                m.setJvmGCTime(rnd.nextInt(20));
                m.setExecutorDeserializeTime(rnd.nextInt(5));
                m.setResultSize(2000 + rnd.nextInt(100));
                m.setPeakExecutionMemory(rnd.nextInt(1 << 24));
                m.inputMetrics().setBytesRead(rnd.nextInt(1 << 27));
                m.inputMetrics().setRecordsRead(rnd.nextInt(1 << 20));
                m.shuffleWriteMetrics().incBytesWritten(rnd.nextInt(1 << 22));
                m.shuffleWriteMetrics().incRecordsWritten(rnd.nextInt(1 << 16));
                m.shuffleWriteMetrics().incWriteTime(rnd.nextInt(1 << 24));
                listener.onTaskEnd(new SparkListenerTaskEnd(stageId, 0, "ResultTask", org.apache.spark.Success$.MODULE$,
                        ti, new ExecutorMetrics(), m));
                if (taskId % 64 == 63) {
                    // one shipment: 3 rows for each of 64 tasks, the stacks among the pool's
                    int rows = 192;
                    int[] rs = new int[rows];
                    long[] rt = new long[rows];
                    long[] rb = new long[rows];
                    int[] rk = new int[rows];
                    long[] rc = new long[rows];
                    int[] used = new int[rows];
                    for (int r = 0; r < rows; r++) {
                        rs[r] = stageId;
                        rt[r] = taskId - r / 3;
                        rb[r] = now / 1000;
                        rk[r] = r;
                        rc[r] = 1 + rnd.nextInt(5);
                        used[r] = rnd.nextInt(stackPool.length);
                    }
                    // the batch's own tables: every frame of its stacks, once
                    java.util.Map<Integer, Integer> local = new java.util.HashMap<>();
                    List<String> frames = new ArrayList<>();
                    int[][] stacks = new int[rows][];
                    String[] states = new String[rows];
                    for (int r = 0; r < rows; r++) {
                        int[] s = stackPool[used[r]];
                        stacks[r] = new int[s.length];
                        for (int i2 = 0; i2 < s.length; i2++) {
                            Integer id = local.get(s[i2]);
                            if (id == null) {
                                id = frames.size();
                                local.put(s[i2], id);
                                frames.add(framePool[s[i2]]);
                            }
                            stacks[r][i2] = id;
                        }
                        states[r] = "runnable";
                    }
                    int[] ts = new int[64];
                    long[] tid = new long[64];
                    long[] tw = new long[64];
                    long[] tq = new long[64];
                    for (int k = 0; k < 64; k++) {
                        ts[k] = stageId;
                        tid[k] = taskId - k;
                        tw[k] = rnd.nextInt(3);
                        tq[k] = rnd.nextInt(1_000_000);
                    }
                    SampleStore.add(new SampleBatch(exec, 100, 1000, frames.toArray(new String[0]), stacks, states,
                            rs, rt, rb, rk, rc, ts, tid, tw, tq, 0));
                }
                if (next < checkpoints.length && taskId + 1 == checkpoints[next]) {
                    next++;
                    long used = usedAfterGc();
                    System.out.printf("tasks %,10d  hook heap %7.1f MB  (heap used %7.1f MB)  kept task records %,d  "
                            + "sample store %.1f MB  %.1f s%n", taskId + 1, (used - base) / 1e6, used / 1e6,
                            keptTasks(listener), SampleStore.bytes() / 1e6, (System.nanoTime() - t0) / 1e9);
                }
            }
            si.completionTime_$eq(scala.Option.apply((Object) now));
            listener.onStageCompleted(new SparkListenerStageCompleted(si));
            listener.onJobEnd(new SparkListenerJobEnd(jobId, now, JobSucceeded$.MODULE$));
            stageId++;
            jobId++;
        }
        long w0 = System.nanoTime();
        listener.onApplicationEnd(new SparkListenerApplicationEnd(now, scala.Option.empty()));
        System.out.printf("application end (trace written, finish started): %.2f s; trace %.1f MB%n",
                (System.nanoTime() - w0) / 1e9,
                new java.io.File(out, "crystalperf-trace.json.gz").length() / 1e6);
    }

    static long keptTasks(CrystalPerfListener l) throws Exception {
        java.lang.reflect.Field f = CrystalPerfListener.class.getDeclaredField("tasks");
        f.setAccessible(true);
        return ((TaskTable) f.get(l)).kept();
    }
}
"""


def _classpath() -> str:
    import pyspark

    from crystalperf.integrations.spark.config import check_installation

    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    return ":".join([str(check_installation()), *map(str, jars)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, nargs="+", default=[10_000, 100_000, 1_000_000],
                        help="task counts to report (the run goes to the largest)")
    parser.add_argument("--tasks-per-stage", type=int, default=1000)
    parser.add_argument("--xmx", default="1g", help="the JVM's maximum heap")
    args = parser.parse_args(argv)
    classpath = _classpath()
    with tempfile.TemporaryDirectory(prefix="crystalperf-spark-memory-") as tmp:
        source = Path(tmp) / "src/org/crystalperf/spark/MemoryBench.java"
        source.parent.mkdir(parents=True)
        source.write_text(DRIVER.replace("{10_000, 100_000, 1_000_000, 10_000_000}",
                                         "{" + ", ".join(str(t) for t in sorted(args.tasks)) + "}"))
        classes = Path(tmp) / "classes"
        subprocess.run(["javac", "-nowarn", "-d", str(classes), "-cp", classpath, str(source)], check=True)
        out = Path(tmp) / "out"
        print(f"synthetic events through CrystalPerfListener, {args.tasks_per_stage} tasks a stage, "  # noqa: T201
              f"-Xmx{args.xmx}, default budgets (spark.crystalperf.maxTaskBytes 32 MiB, maxSampleBytes 16 MiB)",
              flush=True)
        done = subprocess.run(["java", f"-Xmx{args.xmx}", "-XX:+UseSerialGC", "-cp", f"{classes}:{classpath}",
                               "org.crystalperf.spark.MemoryBench", str(max(args.tasks)), str(args.tasks_per_stage),
                               str(out)])
        return done.returncode


if __name__ == "__main__":
    sys.exit(main())
