"""The corpus builder: rules file, labelling, extraction, the out-of-sample frameworks, the split."""

from __future__ import annotations

from pathlib import Path

import pytest

from crystalperf.models.corpus import (
    FORBIDDEN,
    FUNCTION_RULES_PATH,
    RULES_PATH,
    Extracted,
    extract_python_tree,
    label_for,
    label_functions,
    load_rules,
    split_by_library,
)


@pytest.mark.parametrize("path", [RULES_PATH, FUNCTION_RULES_PATH], ids=["library", "function"])
def test_every_rule_has_a_label_pattern_and_reason(path: Path) -> None:
    rules = load_rules(path)
    assert len(rules) >= 30
    assert {r.label for r in rules} == {"cpu", "disk", "network", "skip"}
    assert all(len(r.reason) > 10 for r in rules)
    assert "spark" not in path.read_text().split("# Never add")[0].lower().replace("crystalperf", "")


def test_labels_follow_the_first_matching_rule() -> None:
    rules = load_rules()
    assert label_for("java", "java.net.SocketOutputStream.socketWrite", rules) == "network"
    assert label_for("java", "java.io.FileOutputStream.write", rules) == "disk"
    assert label_for("java", "java.util.regex.Pattern.compile", rules) == "cpu"
    assert label_for("python", "http.client.HTTPConnection.send", rules) == "network"
    assert label_for("python", "shutil.copyfileobj", rules) == "disk"
    assert label_for("python", "json.encoder.JSONEncoder.encode", rules) == "cpu"
    assert label_for("java", "java.net.Socket.getPort", rules) is None  # accessor: skipped
    assert label_for("java", "java.awt.Button.paint", rules) is None  # no rule: left out


def test_frameworks_under_evaluation_never_enter_the_corpus() -> None:
    for name in (
        "pyspark.rdd.RDD.map",
        "org.apache.spark.rdd.RDD.map",
        "tensorflow.python.ops.x",
        "keras.layers.Dense.call",
        "org.apache.flink.runtime.Task.run",
        "pyflink.table.Table",
    ):
        assert FORBIDDEN.search(name), name
    fn = Extracted(
        "py:pyspark",
        "python",
        "pyspark.socket.send",
        "def send(sock):\n    a\n    b\n    sock.sendall(data, more, stuff)\n",
        "",
    )
    assert label_functions([fn], load_rules()) == []


@pytest.mark.parametrize(
    ("rules_path", "parse_reply_label"),
    [(RULES_PATH, "network"), (FUNCTION_RULES_PATH, "cpu")],
    ids=["library", "function"],
)
def test_python_extraction_labels_and_splits_by_library(
    tmp_path: Path, rules_path: Path, parse_reply_label: str
) -> None:
    # The function-level rules label functions of I/O libraries by what their own name says they do.
    for module, name, body in (
        ("socket", "send_request", "sock.sendall(data)\n    reply = sock.recv(4096)\n    sock.close()"),
        (
            "shutil",
            "copy_contents",
            "with open(src) as a, open(dst, 'w') as b:\n        b.write(a.read())\n        b.flush()",
        ),
        (
            "json",
            "work_on_json",
            "parts = [str(v) for v in values]\n    joined = ', '.join(parts)\n    return '[' + joined + ']'",
        ),
        (
            "socket",
            "parse_reply",
            "fields = data.split(b' ')\n    status = int(fields[1])\n    return status, fields[2:]",
        ),
    ):
        with (tmp_path / f"{module}.py").open("a") as fh:
            fh.write(f'def {name}(sock, src, dst, data, values):\n    """Doc of {module}."""\n    {body}\n\n')
    extracted = list(extract_python_tree(tmp_path, prefix="pystd"))
    assert {e.qualified_name for e in extracted} == {
        "socket.send_request",
        "socket.parse_reply",
        "shutil.copy_contents",
        "json.work_on_json",
    }
    records = label_functions(extracted, load_rules(rules_path))
    assert {r["qualified_name"]: r["label"] for r in records} == {
        "socket.send_request": "network",
        "socket.parse_reply": parse_reply_label,
        "shutil.copy_contents": "disk",
        "json.work_on_json": "cpu",
    }
    assert all(r["doc"].startswith("Doc of") for r in records)
    split_by_library(records)
    assert all(r["split"] in ("train", "val", "test") for r in records)
