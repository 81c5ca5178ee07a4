"""Builds ``tensorflow-python.jsonl`` from ``tensorflow-python.picks`` (file | function | label | reason): each picked
function's source (decorators included) and docstring, read with ``ast`` from an installed TensorFlow and Keras the
way crystalperf's Python locator reads them.

    python data/handlabelled/build_tensorflow_python.py SITE_PACKAGES   # tensorflow-cpu 2.21.0, keras 3.15.1
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
FRAMEWORK_SET = HERE.parents[1] / "crystalperf" / "models" / "evaldata" / "frameworks.jsonl"


def functions(site: Path, rel: str) -> dict[str, tuple[str, str]]:
    """{Class.method or function: (code, doc)} of a module's functions and methods (not functions nested in
    functions)."""
    text = (site / rel).read_text(encoding="utf-8")
    lines = text.splitlines()
    out: dict[str, tuple[str, str]] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                out.setdefault(prefix + child.name,
                               ("\n".join(lines[first - 1 : child.end_lineno]), ast.get_docstring(child) or ""))

    visit(ast.parse(text), "")
    return out


def main(site: Path) -> None:
    evaluated = {json.loads(line)["qualified_name"] for line in FRAMEWORK_SET.read_text().splitlines() if line}
    rows, modules = [], {}
    for line in (HERE / "tensorflow-python.picks").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        rel, local, label, reason = (x.strip() for x in line.split("|"))
        if rel not in modules:
            modules[rel] = functions(site, rel)
        code, doc = modules[rel][local]
        name = rel[:-3].replace("/", ".").removesuffix(".__init__") + "." + local
        if name in evaluated:
            raise SystemExit(f"{name} is in the framework evaluation set: it cannot be a development function")
        rows.append({"id": "tensorflow:" + name, "framework": "tensorflow", "qualified_name": name,
                     "language": "python", "origin": "source", "code": code, "doc": doc, "label": label,
                     "reason": reason, "source_trace": ""})
    with (HERE / "tensorflow-python.jsonl").open("w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
