"""What the hook costs on real jobs of every framework: interleaved runs with and without it, wall time and the
CPU time of the job's processes, and what the hook says it cost.

    python bench/overhead.py run SHAPE [--pairs 5] [--results FILE] [--java-options ...]
    python bench/overhead.py summary FILE [FILE ...]

Run each shape with the Python of its framework's environment (``.nox/spark/bin/python`` for the Spark shapes,
``.nox/flink/bin/python`` for Flink, ``.nox/tensorflow/bin/python`` for Keras). Shapes:

- ``spark-tiny``: one stage of 50,000 tasks of about a millisecond each (``local[2]``, a 512 MB driver), then a
  64 x 64 shuffle (``--tasks``);
- ``spark-100ms``: 400 tasks of about 100 ms each, SHA-256 over rows (``--tasks``, ``--rows-per-task``);
- ``spark-sql``: a SQL join and aggregation of 4 M x 0.4 M rows (``--rows``);
- ``flink-wordcount``: lines of 8 words split, grouped and counted (Table API, parallelism 2, ``--rows`` lines);
- ``flink-sql``: ``SUM(SQRT(v*v+1))`` grouped by 1,000 keys over generated rows (parallelism 2, ``--rows``);
- ``keras-fit``: a 2-conv CNN on 64x64 PNG files through tf.data, 60 steps, the callback's default window of 20
  profiled steps and its default job end (the analysis in the background);
- ``spark-cluster``: the what-if bench's wide-row shuffle join on two workers in network namespaces, links relayed
  at 1 Gbit/s (``bench.whatif.cluster``; as root), traced and untraced on one cluster: wall time only.

Every run is a fresh process (and JVM) in a cgroup of its own (cgroup v1 ``cpuacct``, as root), which gives the
CPU time of the job's whole process tree (Python driver, JVM, Python workers) and nothing else's. The timed window
is the job's work after a warm-up (Spark's actions, the Flink job, the profiled steps), not start-up or shutdown,
which are printed apart (Spark's ``stop()``, the end of ``fit``). How the noise of a shared machine is kept out:

- pairs run back to back in alternating order (with/without, then without/with), so a slow drift of the
  machine's load falls on both sides;
- CPU time counts the job's own processes only, the steadier figure when other processes share the cores;
- a run starts only after the previous run's processes are all gone (the cgroup is empty: a detached analysis
  is waited for) and the machine's 1-minute load average is recorded before and after it, with what other
  processes used of the machine's CPUs in the timed window (``/proc/stat`` busy time less the run's own CPU);
- the summary gives medians, the spread of each side and the median of the per-pair ratios;
- ``--side-by-side`` (the local shapes) runs a pair's two runs at once instead, each pinned to a CPU of its own
  with one core's slots (Spark ``local[1]``, Flink parallelism 1, one TensorFlow thread; the CPUs swapped from one
  pair to the next): a machine whose speed drifts within seconds slows both alike, which back-to-back runs cannot
  give. Each run then counts the other among "other processes".

``--results FILE`` appends one JSON line per run, so a shape can be run a pair or two at a time (each under the
team lock) and summarised together. The hook's own figure is what it measured (the trace's ``hook``): for Spark
read through py4j at the window's edges, for Flink from its parts over the job, for Keras from the trace over
the fit.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

CPUACCT = Path("/sys/fs/cgroup/cpuacct")
REPO = Path(__file__).resolve().parents[1]

# What every job script starts with: the CPU time of its process tree, and the result line.
PRELUDE = textwrap.dedent('''
    import json, os, sys, time
    PARAMS = json.loads(sys.argv[1])
    def tree_cpu_s():
        """CPU seconds of this run's processes: its cgroup's, else this process and its descendants'."""
        usage = os.environ.get("OVERHEAD_CPUACCT")
        if usage:
            with open(usage) as f:
                return int(f.read()) / 1e9
        total, ticks = 0.0, os.sysconf("SC_CLK_TCK")
        children = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                children.setdefault(int(fields[1]), []).append((int(entry), fields))
        stack, me = [os.getpid()], os.getpid()
        own = open(f"/proc/{me}/stat").read().rsplit(")", 1)[1].split()
        total += (int(own[11]) + int(own[12])) / ticks
        while stack:
            for pid, fields in children.get(stack.pop(), []):
                total += (int(fields[11]) + int(fields[12])) / ticks
                stack.append(pid)
        return total
    def host_busy_s():
        """CPU seconds the whole machine's CPUs were busy (/proc/stat: all but idle and iowait)."""
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:9]]
        return (sum(values) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")
    def thread_cpu_s(pid):
        """A process's CPU seconds per thread id, with the thread's name (digits dropped: a pool's threads together)."""
        found = {}
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                text = open(f"/proc/{pid}/task/{tid}/stat").read()
            except OSError:
                continue
            name = "".join(c for c in text[text.index("(") + 1:text.rindex(")")] if not c.isdigit()).strip()
            fields = text.rsplit(")", 1)[1].split()
            found[tid] = (name, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))
        return found
    def thread_cpu_since(pid, before):
        """CPU seconds per thread name since ``before`` (threads that ended in between are missing)."""
        threads = {}
        for tid, (name, cpu) in thread_cpu_s(pid).items():
            threads[name] = round(threads.get(name, 0.0) + cpu - before.get(tid, (name, 0.0))[1], 2)
        return {k: v for k, v in threads.items() if v}
    MARKS = []
    def mark():
        MARKS.append(host_busy_s())
        return time.perf_counter(), tree_cpu_s()
    def result(**figures):
        if len(MARKS) >= 2:
            # what other processes used of the machine in the window: the noise a run shared its cores with
            figures["others_cpu_s"] = max(0.0, MARKS[1] - MARKS[0] - figures["cpu_s"])
        print("RESULT " + json.dumps(figures), flush=True)
''')

SPARK = PRELUDE + textwrap.dedent('''
    import gzip, statistics
    from pyspark.sql import SparkSession
    shape, mode, out = PARAMS["shape"], PARAMS["mode"], PARAMS["out"]
    builder = (SparkSession.builder.master(PARAMS.get("master", "local[2]")).appName("overhead-" + shape)
               .config("spark.driver.memory", PARAMS["driver_memory"])
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "64" if shape == "spark-tiny" else "8"))
    if shape == "spark-tiny":
        builder = builder.config("spark.sql.adaptive.enabled", "false")
    if PARAMS["java_options"]:
        builder = builder.config("spark.driver.extraJavaOptions", PARAMS["java_options"])
    if mode == "on":
        from crystalperf.integrations.spark import configure
        # the trace only: the analysis is a process of its own after the job, not the job's cost
        builder = configure(builder, output_dir=out).config("spark.crystalperf.analysis", "false")
    for key, value in PARAMS["conf"].items() if mode == "on" else ():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.range(0, 1000, numPartitions=4).count()  # warm-up: JIT and codegen outside the window
    jvm = spark.sparkContext._gateway.proc.pid  # spark-class execs the JVM: the launcher's pid is the JVM's
    def hook_cpu_s():
        if mode != "on":
            return None
        try:
            return spark._jvm.org.crystalperf.common.HookCpu.total() / 1e9
        except Exception:
            return None
    hook0 = hook_cpu_s()
    threads0 = thread_cpu_s(jvm)
    t0, c0 = mark()
    if shape == "spark-tiny":
        tasks = PARAMS["tasks"]
        rows = spark.range(0, tasks * 20, numPartitions=tasks).selectExpr("id % 64 AS k", "id * 31 % 1009 AS v")
        rows.write.format("noop").mode("overwrite").save()
        spark.range(0, 640_000, numPartitions=64).selectExpr("id % 64 AS k", "id AS v").groupBy("k").agg(
            {"v": "sum"}).collect()
    elif shape == "spark-100ms":
        tasks, per_task = PARAMS["tasks"], PARAMS["rows_per_task"]
        spark.range(0, tasks * per_task, numPartitions=tasks).selectExpr(
            "sha2(cast(id AS string), 256) AS h").write.format("noop").mode("overwrite").save()
    else:
        n = PARAMS["rows"]
        spark.range(0, n).selectExpr("id % 100003 AS k", "id * 7 % 1009 AS v").createOrReplaceTempView("facts")
        spark.range(0, n // 10).selectExpr("id % 100003 AS k", "sha2(cast(id AS string), 256) AS h"
                                           ).createOrReplaceTempView("dims")
        spark.sql("SELECT f.k % 1000 AS g, COUNT(*) AS n, SUM(f.v) AS s, MAX(d.h) AS h FROM facts f "
                  "JOIN dims d ON f.k = d.k GROUP BY f.k % 1000").collect()
    t1, c1 = mark()
    hook1 = hook_cpu_s()
    threads = thread_cpu_since(jvm, threads0)
    before_stop = time.perf_counter()
    spark.stop()
    stop_s = time.perf_counter() - before_stop
    figures = dict(wall_s=t1 - t0, cpu_s=c1 - c0, stop_s=stop_s, threads=threads,
                   hook_cpu_s=hook1 - hook0 if hook0 is not None and hook1 is not None else None)
    trace = os.path.join(out, "crystalperf-trace.json.gz")
    if mode == "on" and os.path.exists(trace):
        with gzip.open(trace, "rt") as f:
            doc = json.load(f)
        driver = (doc.get("hook") or {}).get("processes", [{}])[0]
        figures.update(trace_hook_cpu_s=driver.get("cpu_s"), hook_parts=driver.get("parts"),
                       samples=[driver.get("samples_taken"), driver.get("samples_planned")],
                       over_budget=[driver.get("windows_over_budget"), driver.get("windows")])
        runs = [t["metrics"].get("run_time_s", 0.0) for job in doc["operations"] for stage in job["children"]
                for t in stage.get("tasks", [])]
        if runs:
            figures["task_run_s_median"] = statistics.median(runs)
    result(**figures)
''')

FLINK = PRELUDE + textwrap.dedent('''
    import glob
    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment
    shape, mode, out, rows = PARAMS["shape"], PARAMS["mode"], PARAMS["out"], PARAMS["rows"]
    def environment():
        config = Configuration()
        if mode == "on":
            from crystalperf.integrations import flink as cpflink
            cpflink.configure(config, out, analyze=False)
        config.set_string("parallelism.default", str(PARAMS.get("parallelism", 2)))
        return TableEnvironment.create(EnvironmentSettings.new_instance().in_batch_mode()
                                       .with_configuration(config).build())
    def job(env, n):
        # datagen's default 10,000 rows/s would make the job wait for its source, hiding any cost
        if shape == "flink-wordcount":
            env.execute_sql(f"CREATE TEMPORARY TABLE src (n BIGINT) WITH ('connector'='datagen', "
                            f"'number-of-rows'='{n}', 'fields.n.min'='0', 'fields.n.max'='1000000000', "
                            "'rows-per-second'='1000000000')")
            env.execute_sql("CREATE TEMPORARY TABLE snk (word STRING, c BIGINT) WITH ('connector'='blackhole')")
            line = " || ' ' || ".join(f"'w' || CAST(MOD(n * {p}, 5000) AS STRING)" for p in (1, 7, 13, 31, 61, 97,
                                                                                              127, 251))
            return env.execute_sql(
                f"INSERT INTO snk SELECT word, COUNT(*) FROM (SELECT {line} AS line FROM src) AS l "
                "CROSS JOIN UNNEST(SPLIT(line, ' ')) AS t(word) GROUP BY word")
        env.execute_sql(f"CREATE TEMPORARY TABLE src (k INT, v DOUBLE) WITH ('connector'='datagen', "
                        f"'number-of-rows'='{n}', 'rows-per-second'='1000000000', 'fields.k.min'='0', "
                        "'fields.k.max'='999')")
        env.execute_sql("CREATE TEMPORARY TABLE snk (k INT, s DOUBLE) WITH ('connector'='blackhole')")
        return env.execute_sql("INSERT INTO snk SELECT k, SUM(SQRT(v * v + 1)) FROM src GROUP BY k")
    job(environment(), max(1000, rows // 50)).wait()  # warm-up: the JVM, the planner, the classes
    for old in glob.glob(os.path.join(out, "crystalperf-flink-*.json")):
        os.remove(old)
    env = environment()
    from pyflink.java_gateway import get_gateway
    jvm = get_gateway().jvm.java.lang.ProcessHandle.current().pid()
    threads0 = thread_cpu_s(jvm)
    t0, c0 = mark()
    job(env, rows).wait()
    t1, c1 = mark()
    # the job's task threads have ended by now: what is left is the JVM's own (compilers, collector) and the hook's
    figures = dict(wall_s=t1 - t0, cpu_s=c1 - c0, threads=thread_cpu_since(jvm, threads0))
    if mode == "on":
        time.sleep(1)  # the reporter writes the job's part as its last metric goes
        hook, parts = 0.0, {}
        for path in glob.glob(os.path.join(out, "crystalperf-flink-*.json")):
            with open(path) as f:
                doc = json.load(f)
            for part, seconds in (doc.get("hook") or {}).get("parts", {}).items():
                parts[part] = parts.get(part, 0.0) + seconds
                hook += seconds
        figures.update(hook_cpu_s=hook, hook_parts=parts)
    result(**figures)
''')

# The keras-fit job's input pipeline and model (``images``: a directory of PNGs), shared with
# bench/keras_overhead_parts.py so that both benches time the same steps.
KERAS_MODEL = textwrap.dedent('''
    files = sorted(glob.glob(images + "/*.png"))
    def load(path, label):
        image = tf.io.decode_png(tf.io.read_file(path), channels=3)
        image = tf.image.random_flip_left_right(tf.cast(image, tf.float32) / 255.0)
        return tf.image.random_crop(image, (56, 56, 3)), label
    data = (tf.data.Dataset.from_tensor_slices((files, [i % 10 for i in range(len(files))])).repeat()
            .map(load, num_parallel_calls=2).batch(32).prefetch(2))
    model = keras.Sequential([keras.Input((56, 56, 3)), keras.layers.Conv2D(32, 3, activation="relu"),
                              keras.layers.MaxPooling2D(), keras.layers.Conv2D(64, 3, activation="relu"),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
''')

KERAS = PRELUDE + textwrap.dedent('''
    import glob, gzip
    import tensorflow as tf, keras
    mode, steps, images, out = PARAMS["mode"], PARAMS["steps"], PARAMS["images"], PARAMS["out"]
    if PARAMS.get("threads"):
        tf.config.threading.set_intra_op_parallelism_threads(PARAMS["threads"])
        tf.config.threading.set_inter_op_parallelism_threads(PARAMS["threads"])
''') + KERAS_MODEL + textwrap.dedent('''
    first, stop = 2, 22  # the callback's default window: 20 steps after 2 warm-up steps
    marks, steps_s = {}, []
    class Window(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            self.t = time.perf_counter()
            if batch == first:
                marks["begin"] = mark()
            if batch == stop:
                marks["next_begin"] = time.perf_counter()
        def on_train_batch_end(self, batch, logs=None):
            now = time.perf_counter()
            if first <= batch < stop:
                steps_s.append(now - self.t)
            if batch == stop - 1:
                marks["end"] = mark()
            marks["last_end"] = now
    callbacks = [Window()]
    if mode == "on":
        from crystalperf.integrations.tensorflow import CrystalPerfCallback
        callbacks.append(CrystalPerfCallback(output_dir=out))
    t0 = time.perf_counter()
    model.fit(data, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=callbacks)
    fit_s = time.perf_counter() - t0
    (b_wall, b_cpu), (e_wall, e_cpu) = marks["begin"], marks["end"]
    # the steady steps: the callback starts TensorFlow's profiler in the first profiled step's begin, once a fit
    figures = dict(wall_s=sum(steps_s), steady_s=sum(steps_s[1:]), step_s_median=sorted(steps_s)[len(steps_s) // 2],
                   cpu_s=e_cpu - b_cpu, window_wall_s=e_wall - b_wall, fit_s=fit_s,
                   fit_end_s=t0 + fit_s - marks["last_end"], window_end_s=marks["next_begin"] - e_wall)
    trace = os.path.join(out, "crystalperf-trace.json.gz")
    if mode == "on" and os.path.exists(trace):
        with gzip.open(trace, "rt") as f:
            doc = json.load(f)
        process = (doc.get("hook") or {}).get("processes", [{}])[0]
        figures.update(hook_cpu_s=process.get("cpu_s"), hook_parts=process.get("parts"),
                       samples=[process.get("samples_taken"), process.get("samples_planned")])
        from crystalperf.core.report.document import step_slowdown
        slowdown = step_slowdown(doc.get("metrics") or {})  # the callback's own comparison with later steps
        if slowdown is not None:
            figures.update(self_slowdown=slowdown["ratio"], self_slowdown_se=slowdown["standard_error"])
    result(**figures)
''')

SHAPES: dict[str, dict[str, Any]] = {
    "spark-tiny": {"script": SPARK, "tasks": 50_000},
    "spark-100ms": {"script": SPARK, "tasks": 400, "rows_per_task": 400_000},
    "spark-sql": {"script": SPARK, "rows": 4_000_000},
    "flink-wordcount": {"script": FLINK, "rows": 4_000_000},
    "flink-sql": {"script": FLINK, "rows": 120_000_000},
    "keras-fit": {"script": KERAS, "steps": 60},
    "spark-cluster": {"script": None},
}


def _commit() -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return done.stdout.strip() + ("+changes" if dirty else "")
    return "unknown"


class Cgroup:
    """A cpuacct cgroup for one run (None-like when cgroups cannot be made: the job sums its tree from /proc)."""

    def __init__(self, name: str) -> None:
        self.path: Path | None = CPUACCT / name
        try:
            self.path.mkdir()
        except OSError:
            self.path = None

    def join(self) -> None:
        """In the child, before exec: move into the cgroup."""
        if self.path is not None:
            (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def env(self) -> dict[str, str]:
        return {"OVERHEAD_CPUACCT": str(self.path / "cpuacct.usage")} if self.path is not None else {}

    def drain(self, timeout_s: float = 900.0) -> None:
        """Wait until every process of the run is gone (a detached analysis, a worker daemon), then remove it."""
        if self.path is None:
            return
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            pids = [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
            if not pids:
                break
            time.sleep(1)
        else:
            for pid in pids:  # ours: started by this run
                with contextlib.suppress(OSError):
                    os.kill(pid, 9)
            time.sleep(1)
        with contextlib.suppress(OSError):
            self.path.rmdir()


class Run:
    """One run of a shape: a fresh process in a cgroup of its own, optionally pinned to one CPU."""

    def __init__(self, shape: str, mode: str, params: dict[str, Any], label: str, cpu: int | None = None) -> None:
        spec = SHAPES[shape]
        self.shape, self.mode = shape, mode
        self.out = tempfile.mkdtemp(prefix="overhead-")
        job = {k: v for k, v in spec.items() if k != "script"} | params | {"shape": shape, "mode": mode,
                                                                          "out": self.out}
        self.group = Cgroup(f"crystalperf-overhead-{os.getpid()}-{label}")
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, **self.group.env())
        self.load_before = os.getloadavg()[0]

        def enter() -> None:
            self.group.join()
            if cpu is not None:
                os.sched_setaffinity(0, {cpu})  # the JVM and the Python workers inherit it

        self.process = subprocess.Popen([sys.executable, "-c", spec["script"], json.dumps(job)],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                        preexec_fn=enter, cwd=self.out)

    def figures(self) -> dict[str, Any]:
        stdout, stderr = self.process.communicate()
        self.group.drain()
        load_after = os.getloadavg()[0]
        import shutil

        shutil.rmtree(self.out, ignore_errors=True)
        if self.process.returncode != 0:
            errors = [line for line in stderr.splitlines() if "Error" in line or "Exception" in line]
            sys.exit(f"the {self.mode} run of {self.shape} failed:\n" + "\n".join(errors[:10]) + "\n"
                     + stderr[-2000:])
        line = next(x for x in stdout.splitlines() if x.startswith("RESULT "))
        found: dict[str, Any] = json.loads(line[len("RESULT "):])
        return found | {"shape": self.shape, "mode": self.mode, "load_before": self.load_before,
                        "load_after": load_after, "cgroup": self.group.path is not None}


def run_once(shape: str, mode: str, params: dict[str, Any], label: str) -> dict[str, Any]:
    return Run(shape, mode, params, label).figures()


# What gives a job of each framework one core's worth of slots when its run is pinned to one CPU.
ONE_CORE = {"spark": {"master": "local[1]"}, "flink": {"parallelism": 1}, "keras": {"threads": 1}}


def run_side_by_side(shape: str, params: dict[str, Any], pair: int) -> list[dict[str, Any]]:
    """Both runs of a pair at once, each pinned to a CPU of its own (swapped from one pair to the next): whatever
    slows the machine while they run slows both, which back-to-back runs cannot give. Each job has one core (Spark
    ``local[1]``, Flink parallelism 1, TensorFlow's intra- and inter-op threads 1) and so does the hook beside it;
    what they share is the machine's caches and memory."""
    cpus = sorted(os.sched_getaffinity(0))[:2]
    if pair % 2:
        cpus.reverse()
    one_core = ONE_CORE[shape.split("-")[0]]
    runs = [Run(shape, mode, params | one_core, f"{pair}-{mode}", cpu)
            for mode, cpu in zip(("off", "on"), cpus, strict=True)]
    return [r.figures() | {"cpu": cpu} for r, cpu in zip(runs, cpus, strict=True)]


class ClusterRuns:
    """The ``spark-cluster`` shape: runs of the what-if bench's cluster workload, which starts its own processes
    in network namespaces (no cgroup of ours around them: wall time only)."""

    def __init__(self) -> None:
        sys.path.insert(0, str(REPO))
        from bench.whatif.cluster import ShuffleClusterWorkload

        self.workload = ShuffleClusterWorkload(Path(tempfile.mkdtemp(prefix="overhead-cluster-")), 1000, rtt=True)
        self.out = Path(tempfile.mkdtemp(prefix="overhead-cluster-runs-"))

    def run(self, mode: str, label: str) -> dict[str, Any]:
        # the workload traces the run whose configuration is its baseline object itself; a copy runs untraced
        config = self.workload.baseline if mode == "on" else dict(self.workload.baseline)
        load_before = os.getloadavg()[0]
        runtime = self.workload.run(config, self.out / label).runtime_s
        return {"wall_s": runtime, "cpu_s": None, "shape": "spark-cluster", "mode": mode, "load_before": load_before,
                "load_after": os.getloadavg()[0], "cgroup": False}


def run(args: argparse.Namespace) -> None:
    params: dict[str, Any] = {"driver_memory": args.driver_memory, "java_options": args.java_options,
                              "conf": dict(c.split("=", 1) for c in args.conf)}
    for key in ("tasks", "rows", "rows_per_task", "steps"):
        if getattr(args, key) is not None:
            params[key] = getattr(args, key)
    images = None
    if args.shape == "keras-fit":
        images = tempfile.mkdtemp(prefix="overhead-images-")
        _write_images(images)
        params["images"] = images
    commit = args.label or _commit()
    first_pair = _pairs_so_far(args.results, args.shape) if args.results else 0
    print(f"{args.shape}: {args.pairs} pair(s) from pair {first_pair}, commit {commit}, "
          f"load {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs", flush=True)
    cluster = ClusterRuns() if args.shape == "spark-cluster" else None
    try:
        for pair in range(first_pair, first_pair + args.pairs):
            if args.side_by_side:
                runs = run_side_by_side(args.shape, params, pair)
            else:
                order = ("on", "off") if pair % 2 else ("off", "on")
                runs = []
                for mode in order:
                    label = f"{pair}-{mode}"
                    runs.append(cluster.run(mode, label) if cluster else run_once(args.shape, mode, params, label))
                    if mode == order[0]:
                        time.sleep(args.settle)
            for figures in runs:
                figures |= {"pair": pair, "commit": commit, "time": time.time(), "params": params,
                            "side_by_side": args.side_by_side}
                print(json.dumps(figures), flush=True)
                if args.results:
                    with args.results.open("a") as f:
                        f.write(json.dumps(figures) + "\n")
            time.sleep(args.settle)
    finally:
        if images is not None:
            import shutil

            shutil.rmtree(images, ignore_errors=True)


def _pairs_so_far(path: Path, shape: str) -> int:
    if not path.is_file():
        return 0
    pairs = {json.loads(line)["pair"] for line in path.read_text().splitlines()
             if line.strip() and json.loads(line)["shape"] == shape}
    return max(pairs) + 1 if pairs else 0


def _write_images(folder: str) -> None:
    import tensorflow as tf

    rng = tf.random.Generator.from_seed(0)
    for i in range(256):
        image = tf.cast(rng.uniform((64, 64, 3), 0, 255), tf.uint8)
        tf.io.write_file(f"{folder}/img-{i:03d}.png", tf.io.encode_png(image))


def _spread(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}"


def summary(args: argparse.Namespace) -> None:
    rows = [json.loads(line) for path in args.files for line in Path(path).read_text().splitlines() if line.strip()]
    for shape in dict.fromkeys(r["shape"] for r in rows):
        runs = [r for r in rows if r["shape"] == shape]
        pairs: dict[int, dict[str, dict[str, Any]]] = {}
        for r in runs:
            pairs.setdefault(r["pair"], {})[r["mode"]] = r
        complete = [p for p in pairs.values() if "on" in p and "off" in p]
        if not complete:
            continue
        loads = [r["load_before"] for r in runs] + [r["load_after"] for r in runs]
        others = [r["others_cpu_s"] / r["wall_s"] for r in runs if r.get("others_cpu_s") is not None and r["wall_s"]]
        commits = sorted({r["commit"] for r in runs})
        print(f"\n{shape}: {len(complete)} pairs, commit {', '.join(commits)}, load average "  # noqa: T201
              f"{min(loads):.2f}-{max(loads):.2f} (median {statistics.median(loads):.2f})"
              + (f"; other processes used {statistics.median(others):.2f} CPUs in the windows "
                 f"({min(others):.2f}-{max(others):.2f})" if others else ""))
        for key, label in (("wall_s", "wall"), ("cpu_s", "CPU")):
            if any(p[side].get(key) is None for p in complete for side in ("on", "off")):
                continue
            off = [p["off"][key] for p in complete]
            on = [p["on"][key] for p in complete]
            ratios = [p["on"][key] / p["off"][key] - 1 for p in complete]
            print(f"  {label:5} without {statistics.median(off):8.2f} s ({_spread(off)})  with "  # noqa: T201
                  f"{statistics.median(on):8.2f} s ({_spread(on)})  overhead of the medians "
                  f"{100 * (statistics.median(on) / statistics.median(off) - 1):+.2f} %, median of the pairs "
                  f"{100 * statistics.median(ratios):+.2f} % ({100 * min(ratios):+.1f} to {100 * max(ratios):+.1f})")
        hook = [(p["on"].get("hook_cpu_s"), p["on"]["cpu_s"], p["off"]["cpu_s"]) for p in complete]
        hook = [h for h in hook if None not in h]
        if hook:
            own = [h / on for h, on, _ in hook]
            measured = [(on - off) / on for _, on, off in hook]
            print(f"  hook's own CPU {statistics.median(h for h, _, _ in hook):.2f} s, "  # noqa: T201
                  f"{100 * statistics.median(own):.2f} % of the run's CPU; A/B difference "
                  f"{100 * statistics.median(measured):+.2f} % of it: "
                  f"{100 * abs(statistics.median(own) - statistics.median(measured)):.2f} points apart")
            parts: dict[str, list[float]] = {}
            for p in complete:
                for name, seconds in (p["on"].get("hook_parts") or {}).items():
                    parts.setdefault(name, []).append(seconds)
            if parts:
                print("  hook's parts (median s): " + ", ".join(  # noqa: T201
                    f"{name} {statistics.median(v):.3f}" for name, v in sorted(parts.items(), key=lambda kv: -max(kv[1]))))
        slowdowns = [p["on"]["self_slowdown"] for p in complete if p["on"].get("self_slowdown") is not None]
        if slowdowns:
            print(f"  the callback's own comparison of the profiled steps with the later ones: median "  # noqa: T201
                  f"{100 * statistics.median(slowdowns):+.1f} % ({100 * min(slowdowns):+.1f} to "
                  f"{100 * max(slowdowns):+.1f}; the pairs' A/B of the median step is above)")
        for key in ("stop_s", "fit_s", "fit_end_s", "window_end_s", "steady_s", "step_s_median", "task_run_s_median"):
            if all(key in p["on"] for p in complete):
                on = [p["on"][key] for p in complete]
                text = f"  {key}: with {statistics.median(on):.3f}"
                if all(key in p["off"] for p in complete):
                    text += f", without {statistics.median(p['off'][key] for p in complete):.3f}"
                    ratios = [p["on"][key] / p["off"][key] - 1 for p in complete if p["off"][key]]
                    if ratios and key in ("steady_s", "step_s_median"):  # the others are near 0 without the hook
                        text += (f", median of the pairs {100 * statistics.median(ratios):+.2f} % "
                                 f"({100 * min(ratios):+.1f} to {100 * max(ratios):+.1f})")
                print(text)  # noqa: T201
        if all("threads" in p["on"] and "threads" in p["off"] for p in complete):
            names = {n for p in complete for side in ("on", "off") for n in p[side]["threads"]}
            threads = []
            for name in names:
                on = statistics.median(p["on"]["threads"].get(name, 0.0) for p in complete)
                off = statistics.median(p["off"]["threads"].get(name, 0.0) for p in complete)
                if max(on, off) >= 0.1:
                    threads.append((on - off, name, off, on))
            print("  JVM CPU s per thread (median, without -> with): " + ", ".join(  # noqa: T201
                f"{name} {off:.2f} -> {on:.2f}" for _, name, off, on in sorted(threads, reverse=True)[:12]))
        thinned = [p["on"]["samples"] for p in complete if p["on"].get("samples")]
        if thinned and any(s[0] is not None for s in thinned):
            print("  sampling rounds taken/planned: " + ", ".join(f"{s[0]}/{s[1]}" for s in thinned))  # noqa: T201


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    runner = commands.add_parser("run", help="interleaved pairs of one shape")
    runner.add_argument("shape", choices=sorted(SHAPES))
    runner.add_argument("--pairs", type=int, default=5)
    runner.add_argument("--results", type=Path, help="append each run's figures to this JSON-lines file")
    runner.add_argument("--settle", type=float, default=2.0, help="seconds between runs")
    runner.add_argument("--label", help="what the runs measured (default: the checkout's commit)")
    runner.add_argument("--tasks", type=int)
    runner.add_argument("--rows", type=int)
    runner.add_argument("--rows-per-task", type=int)
    runner.add_argument("--steps", type=int)
    runner.add_argument("--driver-memory", default="512m")
    runner.add_argument("--java-options", default="", help="the Spark driver JVM's options, on both sides (with '=': --java-options=-XX:...)")
    runner.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark property of the runs with the hook (e.g. spark.crystalperf.cpuBudget=0)")
    runner.add_argument("--side-by-side", action="store_true",
                        help="run each pair's two runs at once, each pinned to a CPU of its own with one core's "
                             "slots (local[1], parallelism 1, one TensorFlow thread)")
    summarise = commands.add_parser("summary", help="medians of the runs in results files")
    summarise.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args()
    if args.command == "run" and args.side_by_side and (args.shape == "spark-cluster"
                                                        or len(os.sched_getaffinity(0)) < 2):
        parser.error("--side-by-side needs a local shape and two CPUs")
    if args.command == "run":
        run(args)
    else:
        summary(args)


if __name__ == "__main__":
    main()
