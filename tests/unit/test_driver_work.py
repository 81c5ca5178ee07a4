"""The driver's own work outside every operation (samples keyed to ``tr.DRIVER_OPERATION``), by hand."""

from __future__ import annotations

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.analysis import analyze
from crystalperf.core.attribution.classify import KeywordClassifier
from crystalperf.core.profile.dag import build_profile
from crystalperf.core.profile.driver import driver_work
from crystalperf.core.report.html import HtmlRenderer

from .helpers import make_trace, op, task


def _trace() -> tr.Trace:
    # Two 1 s jobs with 8 s between them. The driver's main thread outside its Spark calls, at 0.1 s a sample:
    # 30 samples computing in etl.rank (line 12), 20 sleeping in the program's top level, 5 starting the hook.
    frames = [tr.Frame(name="etl.rank", file="/jobs/etl.py", line=12, language="python"),
              tr.Frame(name="etl.<module>", file="/jobs/etl.py", line=1, language="python"),
              tr.Frame(name="time.sleep", language="python"),
              tr.Frame(name="crystalperf.core.record.sampling.PythonStackSampler.start", language="python"),
              tr.Frame(name="job.Hash.run", language="java")]
    driver = tr.SampleKey(operation=tr.DRIVER_OPERATION, thread="python-driver")
    samples = tr.StackSamples(origin=0, interval_s=0.1, frames=frames,
                              stacks=[[0, 1], [2, 1], [3, 1], [4]],
                              states=[tr.THREAD_RUNNABLE, tr.THREAD_WAITING, tr.THREAD_WAITING, tr.THREAD_RUNNABLE],
                              keys=[driver, tr.SampleKey(operation="a")], key=[0, 0, 0, 1], bucket=[2, 3, 0, 0],
                              stack=[0, 1, 2, 3], count=[30, 20, 5, 10])
    jobs = [op("a", 0, 1, tasks=[task("a1", 0, 1, cpu_time_s=1.0)]),
            op("b", 9, 10, parents=["a"], tasks=[task("b1", 9, 10, cpu_time_s=1.0)])]
    return make_trace(jobs, end=10.0, samples=samples)


def test_the_drivers_own_samples_are_named_by_function_without_the_hooks_own() -> None:
    work = driver_work(build_profile(_trace(), KeywordClassifier(), locators=[]))
    assert work is not None and work.samples == 50
    assert work.seconds == pytest.approx(5.0) and work.waiting_s == pytest.approx(2.0)
    rank, top = work.functions
    assert (rank.name, rank.where, rank.resource) == ("etl.rank", "/jobs/etl.py:12", "cpu")
    assert rank.seconds == pytest.approx(3.0)
    # a sleep is waiting, named by the program's frame it was called from; a module's top level is its file
    assert (top.name, top.where, top.resource) == ("etl.<module>", "/jobs/etl.py", "waiting")
    assert work.sentence() == ("Outside its calls into Spark the driver's own Python ran about 3.00 s and waited "
                               "about 2.00 s (sampled 50 times): 3.00 s on cpu in etl.rank (etl.py:12), 2.00 s waiting "
                               "in etl.<module> (etl.py).")


def test_the_report_and_its_advice_carry_the_drivers_work() -> None:
    report = analyze(_trace(), classifier=KeywordClassifier(), locators=[], scenarios=[]).report
    assert report["bottleneck"]["driver_work"]["functions"][0]["name"] == "etl.rank"
    assert any(a.startswith("Outside its calls into Spark the driver's own Python") for a in report["advice"])
    # the verdict of a run mostly outside its operations says what the driver did in that time
    assert "; the driver worked about 3.00 s of it, most in etl.rank)" in report["bottleneck"]["sentence"]
    # the operations' own vectors know nothing of it
    assert all(o["vector"]["cpu"] == pytest.approx(1.0) for o in report["operations"])
    html = HtmlRenderer().render(report)
    assert 'id="driver-work"' in html and "<code>etl.rank</code>" in html and "/jobs/etl.py:12" in html


def test_no_driver_samples_no_driver_work() -> None:
    trace = _trace()
    assert trace.samples is not None
    trace.samples.keys[0] = tr.SampleKey(operation="a", thread="python-driver")
    assert driver_work(build_profile(trace, KeywordClassifier(), locators=[])) is None


def _jvm_trace() -> tr.Trace:
    # A PySpark driver JVM's py4j thread, at 0.1 s a sample: 12 samples deep in a query's analysis under the program's
    # call Dataset.withColumn (the middle of the stack elided by the sampler), 3 samples loading classes in a
    # SparkSession's constructor; and the program's Python, 10 samples in etl.rank.
    frames = [tr.Frame(name="org.apache.spark.sql.catalyst.trees.TreeNode.transformDown", file="TreeNode.scala",
                       line=480, language="scala"),
              tr.Frame(name="org.apache.spark.sql.catalyst.analysis.Analyzer.execute", file="Analyzer.scala",
                       line=220, language="scala"),
              tr.Frame(name="org.apache.spark.sql.classic.Dataset.withColumn", file="Dataset.scala", line=1600,
                       language="scala"),
              tr.Frame(name="jdk.internal.reflect.DirectMethodHandleAccessor.invoke", language="java"),
              tr.Frame(name="py4j.reflection.MethodInvoker.invoke", file="MethodInvoker.java", line=244,
                       language="java"),
              tr.Frame(name="py4j.ClientServerConnection.run", file="ClientServerConnection.java", line=106,
                       language="java"),
              tr.Frame(name="java.lang.ClassLoader.defineClass1", language="native"),
              tr.Frame(name="org.apache.spark.sql.classic.SparkSession.<init>", file="SparkSession.scala", line=117,
                       language="scala"),
              tr.Frame(name="etl.rank", file="/jobs/etl.py", line=12, language="python")]
    jvm = tr.SampleKey(operation=tr.DRIVER_OPERATION, thread="jvm-driver")
    python = tr.SampleKey(operation=tr.DRIVER_OPERATION, thread="python-driver")
    samples = tr.StackSamples(origin=0, interval_s=0.1, frames=frames,
                              stacks=[[0, 1, 2, 3, 4, 5], [6, 7, 3, 4, 5], [8]],
                              states=[tr.THREAD_RUNNABLE] * 3, keys=[jvm, python], key=[0, 0, 1],
                              bucket=[2, 1, 3], stack=[0, 1, 2], count=[12, 3, 10])
    jobs = [op("a", 0, 1, tasks=[task("a1", 0, 1, cpu_time_s=1.0)]),
            op("b", 9, 10, parents=["a"], tasks=[task("b1", 9, 10, cpu_time_s=1.0)])]
    return make_trace(jobs, end=10.0, samples=samples)


def test_the_driver_jvms_work_is_named_by_the_programs_call_into_spark() -> None:
    work = driver_work(build_profile(_jvm_trace(), KeywordClassifier(), locators=[]))
    assert work is not None and work.samples == 25
    assert work.seconds == pytest.approx(2.5) and work.jvm_s == pytest.approx(1.5)
    with_column, rank, session = work.functions
    assert (with_column.name, with_column.runtime, with_column.where) == (
        "org.apache.spark.sql.classic.Dataset.withColumn", "jvm", "Dataset.scala:1600")
    assert with_column.seconds == pytest.approx(1.2) and with_column.resource == "cpu"
    # what did the work under the call: the sampled function of its stacks
    assert [f.name for f in with_column.within] == ["org.apache.spark.sql.catalyst.trees.TreeNode.transformDown"]
    assert (session.name, session.seconds) == ("org.apache.spark.sql.classic.SparkSession.<init>", pytest.approx(0.3))
    assert (rank.name, rank.runtime) == ("etl.rank", "python")
    sentence = work.sentence()
    assert sentence.startswith("Outside its calls into Spark the driver's own Python ran about 1.00 s and waited "
                               "about 0.00 s (sampled 25 times): 1.00 s on cpu in etl.rank (etl.py:12). ")
    assert ("Outside Spark's jobs the driver's JVM worked about 1.50 s on the program's calls: 1.20 s on cpu in "
            "org.apache.spark.sql.classic.Dataset.withColumn (mostly "
            "org.apache.spark.sql.catalyst.trees.TreeNode.transformDown)") in sentence
    listed = work.as_dict()["functions"][0]
    assert listed["runtime"] == "jvm" and listed["functions"][0]["name"].endswith("TreeNode.transformDown")


def test_the_html_lists_a_jvm_call_with_the_functions_under_it() -> None:
    report = analyze(_jvm_trace(), classifier=KeywordClassifier(), locators=[], scenarios=[]).report
    html = HtmlRenderer().render(report)
    assert "<code>org.apache.spark.sql.classic.Dataset.withColumn</code><br><small>mostly in <code>" \
           "org.apache.spark.sql.catalyst.trees.TreeNode.transformDown</code>" in html
    assert any("the driver's JVM worked about 1.50 s" in a for a in report["advice"])


def test_a_connect_requests_call_is_the_first_frame_past_the_servers_own_handling() -> None:
    from crystalperf.core.profile.driver import _program_call

    names = ["org.apache.spark.sql.catalyst.analysis.Analyzer.execute",  # innermost
             "org.apache.spark.sql.execution.QueryExecution.<init>",
             "org.apache.spark.sql.classic.Dataset$.ofRows",
             "org.apache.spark.sql.SparkSession.withActive",
             "org.apache.spark.sql.connect.execution.SparkConnectPlanExecution.handlePlan",
             "org.apache.spark.JobArtifactSet$.withActiveJobArtifactState",
             "org.apache.spark.util.Utils$.withContextClassLoader",
             "org.apache.spark.sql.artifact.ArtifactManager.withResources",
             "org.apache.spark.sql.connect.execution.ExecuteThreadRunner$ExecutionThread.run"]
    frames = [tr.Frame(name=n, language="scala") for n in names]
    call = _program_call(frames, list(range(len(frames))))
    assert call is not None and frames[call].name == "org.apache.spark.sql.classic.Dataset$.ofRows"
    # a Scala program's own loop, which called nothing of Spark's
    frames = [tr.Frame(name="Crunch.crunch", language="java"), tr.Frame(name="Crunch.main", language="java"),
              tr.Frame(name="jdk.internal.reflect.DirectMethodHandleAccessor.invoke", language="java"),
              tr.Frame(name="org.apache.spark.deploy.SparkSubmit.main", language="scala")]
    call = _program_call(frames, [0, 1, 2, 3])
    assert call is not None and frames[call].name == "Crunch.main"


def test_a_network_share_the_counters_did_not_see_is_cpu_in_the_drivers_work_as_in_the_operations() -> None:
    frames = [tr.Frame(name="java.net.SocketOutputStream.socketWrite", language="java"),
              tr.Frame(name="org.apache.spark.sql.classic.Dataset.collectToPython", language="scala")]
    samples = tr.StackSamples(origin=0, interval_s=0.1, frames=frames, stacks=[[0, 1]],
                              states=[tr.THREAD_RUNNABLE],
                              keys=[tr.SampleKey(operation=tr.DRIVER_OPERATION, thread="jvm-driver")],
                              key=[0], bucket=[0], stack=[0], count=[10])
    trace = make_trace([op("a", 0, 1, tasks=[task("a1", 0, 1, cpu_time_s=1.0)])], end=10.0, samples=samples)
    profile = build_profile(trace, KeywordClassifier(), locators=[])
    work = driver_work(profile)
    assert work is not None and work.functions[0].resource == "network"
    profile.network_idle = True  # what the OS counters say of a run whose processes moved no bytes
    profile.memo.clear()
    work = driver_work(profile)
    assert work is not None and work.functions[0].resource == "cpu"
