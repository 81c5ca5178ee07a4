"""The core's folders are the stages a trace goes through, and the arrows run one way.

A module of a stage imports only the ground floor and the stages before it (``STAGES``); nothing in the core
imports in a circle; no module grows past ``MAX_LINES``; ``predict/__init__.py`` only re-exports; and
``analyze`` meets the stages in their order, never returning to one it has left."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import networkx as nx
import pytest

CORE = Path(__file__).resolve().parents[2] / "crystalperf" / "core"
# The stages in the order a trace goes through them (docs/architecture.md).
STAGES = ("trace", "record", "attribution", "profile", "predict", "report")
# The ground floor: what every stage may use, importing no stage itself.
GROUND = ("units", "errors", "resources", "atomic", "limits", "collector", "parallel", "schedule")
# Above the stages: one run through them, two runs side by side, the job end, the notebook view, the CLI.
TOP = ("analysis", "compare", "finish", "notebook", "cli")
MAX_LINES = 600


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(CORE.parent.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(CORE.rglob("*.py"))}


def _imports(name: str, path: Path) -> set[str]:
    """The core modules ``name`` imports, anywhere in it (functions included), resolved to the module."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                found.add(target)
                break
    return found


def _place(name: str) -> tuple[str, int]:
    """("ground" | "stage" | "top" | "package", rank): where a core module stands."""
    part = name.split(".")[2] if name.count(".") >= 2 else ""
    if part in GROUND:
        return "ground", -1
    if part in STAGES:
        return "stage", STAGES.index(part)
    if part in TOP:
        return "top", len(STAGES)
    return "package", -2


def test_every_core_module_has_a_place():
    assert [n for n in MODULES if n != "crystalperf.core" and _place(n)[0] == "package"] == []


@pytest.mark.parametrize("name", [n for n in MODULES if n != "crystalperf.core"])
def test_a_stage_imports_only_the_ground_and_the_stages_before_it(name):
    kind, rank = _place(name)
    if kind == "top":
        return
    wrong = []
    for target in _imports(name, MODULES[name]):
        target_kind, target_rank = _place(target)
        if kind == "ground" and target_kind != "ground":
            wrong.append(target)
        elif kind == "stage" and (target_kind == "top" or (target_kind == "stage" and target_rank > rank)):
            wrong.append(target)
    assert wrong == [], f"{name} ({kind} {STAGES[rank] if kind == 'stage' else ''}) imports later stages: {wrong}"


def test_no_import_circle_in_the_core():
    graph = nx.DiGraph()
    for name, path in MODULES.items():
        graph.add_node(name)
        graph.add_edges_from((name, target) for target in _imports(name, path))
    assert list(nx.simple_cycles(graph)) == []


def test_no_core_module_is_over_the_line_limit():
    over = {name: n for name, path in MODULES.items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert over == {}


def test_predict_package_only_re_exports():
    tree = ast.parse((CORE / "predict" / "__init__.py").read_text())
    kinds = {type(node).__name__ for node in tree.body}
    assert kinds <= {"Expr", "ImportFrom", "Assign"}, kinds


def test_analyze_meets_the_stages_in_order(tmp_path):
    """The calls ``analyze`` makes, by the stage of the function called, never go back to a stage left."""
    from crystalperf.core import trace as tr
    from crystalperf.core.analysis import analyze
    from crystalperf.core.attribution.classify import KeywordClassifier

    trace = tr.load_trace(Path(__file__).resolve().parents[1] / "data" / "spark-demo-trace.json.gz")
    analysis_file = str(CORE / "analysis.py")
    met: list[str] = []

    def watch(frame, event, arg):  # noqa: ANN001 - sys.setprofile's signature
        if event != "call" or frame.f_back is None or frame.f_back.f_code.co_filename != analysis_file:
            return
        if frame.f_back.f_code.co_name != "analyze":
            return
        module = frame.f_globals.get("__name__", "")
        if module.startswith("crystalperf.core."):
            kind, rank = _place(module)
            if kind == "stage" and (not met or met[-1] != STAGES[rank]):
                met.append(STAGES[rank])

    sys.setprofile(watch)
    try:
        analyze(trace, classifier=KeywordClassifier())
    finally:
        sys.setprofile(None)
    assert met == sorted(met, key=STAGES.index), met
    assert met[0] == "attribution" and met[-1] == "report"
