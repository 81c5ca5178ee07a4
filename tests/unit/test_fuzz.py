"""Mutated and truncated traces: every one ends in exit 2 with one line, or is analysed. Never a traceback."""

import copy
import json
import random

import pytest

from crystalperf.core.cli import main
from crystalperf.core.synthetic import spark_like_trace

CASES = 240


def _mutations(doc: dict, rng: random.Random):
    """Yield broken variants of a valid trace document."""
    text = json.dumps(doc)
    junk = [None, -1, 1e309, "x", [], {}, True, 2**70, -1e-9, "NaN"]
    paths = []

    def collect(node, path):
        paths.append(path)
        if isinstance(node, dict):
            for k, v in node.items():
                collect(v, (*path, k))
        elif isinstance(node, list):
            for i, v in enumerate(node[:4]):
                collect(v, (*path, i))

    collect(doc, ())
    while True:
        kind = rng.randrange(5)
        if kind == 0:  # truncated text
            yield text[: rng.randrange(len(text))], "text"
            continue
        mutated = copy.deepcopy(doc)
        path = rng.choice(paths[1:])
        parent = mutated
        for p in path[:-1]:
            parent = parent[p]
        if kind == 1:
            parent[path[-1]] = rng.choice(junk)
        elif kind == 2 and isinstance(parent, dict):
            del parent[path[-1]]
        elif kind == 3:
            parent[path[-1]] = copy.deepcopy(rng.choice([mutated.get("application"), [1, 2], "zz"]))
        else:
            raw = bytearray(text.encode())
            for _ in range(rng.randrange(1, 6)):
                raw[rng.randrange(len(raw))] = rng.randrange(256)
            yield bytes(raw), "bytes"
            continue
        yield json.dumps(mutated, allow_nan=True), "text"


def test_fuzzed_traces_never_give_a_traceback(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CRYSTALPERF_CACHE_DIR", str(tmp_path / "cache"))
    doc = json.loads(spark_like_trace(jobs=1, stages_per_job=2, tasks_per_stage=3, samples_per_second=4).to_json())
    rng = random.Random(1234)
    outcomes = {0: 0, 2: 0}
    gen = _mutations(doc, rng)
    for i in range(CASES):
        payload, kind = next(gen)
        path = tmp_path / f"case{i}.json"
        if kind == "bytes":
            path.write_bytes(payload)
        else:
            path.write_text(payload)
        try:
            code = main(["analyze", str(path), "--out", str(tmp_path / "out"), "-q", "--classifier", "keyword"])
        except SystemExit as exc:  # pragma: no cover - would be a bug
            pytest.fail(f"case {i} raised SystemExit({exc.code})")
        err = capsys.readouterr().err
        assert code in (0, 2), f"case {i}: exit {code}: {err}"
        outcomes[code] += 1
        if code == 2:
            assert err.count("\n") == 1 and "Traceback" not in err, f"case {i}: {err!r}"
            assert str(path) in err, f"case {i}: the error does not name the file: {err!r}"
    assert outcomes[2] >= CASES // 2, outcomes
