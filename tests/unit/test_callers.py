"""The caller of a runtime library's function (the JDK's, Python's standard library), by hand."""

from __future__ import annotations

from crystalperf.core import trace as tr
from crystalperf.core.analysis import analyze
from crystalperf.core.attribution.callers import caller, is_runtime_frame
from crystalperf.core.attribution.classify import KeywordClassifier

from .helpers import make_trace, op, task

FORK = ["java.lang.ProcessImpl.forkAndExec", "java.lang.ProcessImpl.<init>", "java.lang.ProcessBuilder.start",
        "org.apache.hadoop.util.Shell.runCommand", "org.apache.hadoop.fs.RawLocalFileSystem.setPermission",
        "java.lang.Thread.run"]
HASH = ["org.example.Digest.update", "org.example.Job.run", "java.lang.Thread.run"]
RECV = ["socket.socket.recv_into", "http.client.HTTPResponse.read", "etl.fetch_page", "etl.main"]


def _frames(*stacks: list[str]) -> tuple[list[tr.Frame], list[list[int]]]:
    names = list(dict.fromkeys(n for stack in stacks for n in stack))
    frames = [tr.Frame(name=n, language="python" if "." in n and n.split(".")[0] in ("socket", "http", "etl")
                       else "java") for n in names]
    return frames, [[names.index(n) for n in stack] for stack in stacks]


def test_runtime_frames_are_the_jdk_s_and_python_s_standard_library() -> None:
    assert is_runtime_frame("java.lang.ProcessImpl.<init>") and is_runtime_frame("sun.nio.ch.FileDispatcherImpl.read")
    assert is_runtime_frame("socket.socket.recv_into") and is_runtime_frame("json.decoder.JSONDecoder.decode")
    assert not is_runtime_frame("org.apache.hadoop.util.Shell.runCommand") and not is_runtime_frame("etl.fetch_page")
    assert not is_runtime_frame("__main__.main") and not is_runtime_frame("socket")  # a module, no function


def test_the_caller_is_the_first_frame_outside_the_runtime_above_the_function() -> None:
    frames, (fork, digest, recv) = _frames(FORK, HASH, RECV)
    assert caller(frames, fork, "java.lang.ProcessImpl.<init>") == "org.apache.hadoop.util.Shell.runCommand"
    assert caller(frames, recv, "socket.socket.recv_into") == "etl.fetch_page"  # http.client is the runtime's too
    assert caller(frames, digest, "org.example.Digest.update") is None  # not a runtime function: it is the code
    assert caller(frames, fork, "java.lang.Thread.run") is None  # nothing outside the runtime above it
    assert caller(frames, digest, "java.lang.ProcessImpl.<init>") is None  # not on the stack


def test_the_report_names_who_called_a_jdk_top_function() -> None:
    frames, (fork, digest, _) = _frames(FORK, HASH, RECV)
    stage = op("stage-0", 0.0, 10.0, kind="stage", tasks=[task("t0", 0.0, 10.0, run_time_s=10.0)])
    trace = make_trace([stage])
    # 30 samples in the fork, 10 hashing: the fork leads, and says whose it was
    trace.samples = tr.StackSamples(interval_s=0.1, bucket_s=1.0, origin=0.0, frames=frames, stacks=[fork, digest],
                                    keys=[tr.SampleKey(operation="stage-0", thread="task")],
                                    key=[0, 0], bucket=[0, 0], stack=[0, 1], count=[30, 10])
    report = analyze(trace, classifier=KeywordClassifier(), locators=[], scenarios=[]).report
    entry = next(o for o in report["operations"] if o["id"] == "stage-0")
    tops = {f["name"]: f["called_from"] for f in entry["top_functions"]}
    assert tops["org.example.Digest.update"] is None
    (forked,) = [name for name in tops if name.startswith("java.lang.ProcessImpl")]
    assert tops[forked] == "org.apache.hadoop.util.Shell.runCommand"
