"""Names for the work a Spark Connect client asked for.

A Spark Connect server names every job and stage it runs after the client's request: the call site is
``Spark Connect - `` and the request in protobuf's text format (``session_id: "…"\\nplan {\\n  root {\\n
common {…} aggregate {\\n input {…`` for a DataFrame, ``command { write_operation {…`` for a write), cut to a few
lines in the short form, whole in the long one (Spark's ``SparkConnectPlanner``, which elides the messages' values).
As an operation's name that is a page of braces. :func:`plan_summary` reads the relations the plan is built from
out of the long form and names the work after them in the order the data flows: ``range → with_columns →
aggregate → aggregate``, ``read parquet → filter → write_operation``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

CONNECT_PREFIX = "Spark Connect - "
# What the names given here begin with.
CONNECT_NAME = "Spark Connect"
# A summary longer than this is cut (a plan of dozens of relations): the name must fit a report's line.
MAX_SUMMARY = 120
# Fields of a relation type that hold the relations it reads (connect's relations.proto).
_INPUT_FIELDS = ("input", "left", "right", "inputs", "other", "relation")
# Message fields that are not the relation type of a Relation.
_NOT_RELATION_TYPES = ("common", "extension")
_OPEN = re.compile(r"^\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*\{\s*$")
_VALUE = re.compile(r"^\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*:\s*(?P<value>.*?)\s*$")
# Messages nested deeper than this are not followed, and text past this is not read (a hostile or broken
# description stays bounded; the listener keeps 16,000 characters of a request).
_MAX_DEPTH = 200
MAX_REQUEST_CHARS = 64_000


@dataclass
class _Message:
    name: str
    children: list[_Message] = field(default_factory=list)
    values: dict[str, str] = field(default_factory=dict)

    def child(self, name: str) -> _Message | None:
        return next((c for c in self.children if c.name == name), None)


def _parse(text: str) -> _Message:
    """The messages of a protobuf text-format document (what this module needs of it: nesting, scalar fields)."""
    root = _Message("")
    stack = [root]
    for line in text.splitlines():
        opened = _OPEN.match(line)
        if opened and len(stack) < _MAX_DEPTH:
            message = _Message(opened["name"])
            stack[-1].children.append(message)
            stack.append(message)
        elif line.strip() == "}" and len(stack) > 1:
            stack.pop()
        elif (value := _VALUE.match(line)) is not None:
            stack[-1].values.setdefault(value["name"], value["value"].strip('"'))
    return root


def _relation_steps(relation: _Message, depth: int = 0) -> list[str]:
    """The relation's work in data-flow order: what it reads first, itself last."""
    kind = next((c for c in relation.children if c.name not in _NOT_RELATION_TYPES), None)
    if kind is None or depth > _MAX_DEPTH:
        return []
    inputs = [c for c in kind.children if c.name in _INPUT_FIELDS]
    own = _label(kind)
    if len(inputs) == 1:
        return [*_relation_steps(inputs[0], depth + 1), own]
    if len(inputs) > 1:
        branches = [" → ".join(_relation_steps(c, depth + 1)) or "?" for c in inputs]
        return [f"{own}({', '.join(branches)})"]
    return [own]


def _label(kind: _Message) -> str:
    """A relation type's name, with what says most about it where the text has it: the source a read reads, the
    table, the SQL."""
    if kind.name == "read":
        source = kind.child("data_source")
        table = kind.child("named_table")
        if source is not None and source.values.get("format"):
            return f"read {source.values['format']}"
        if table is not None and table.values.get("unparsed_identifier"):
            return f"read {table.values['unparsed_identifier']}"
    if kind.name == "sql" and kind.values.get("query"):
        query = " ".join(kind.values["query"].split())
        return f"sql: {query[:60]}" + ("…" if len(query) > 60 else "")
    return kind.name


def plan_summary(request: str) -> str | None:
    """The work of a Spark Connect request (its text format, as the call site holds it), in data-flow order;
    None when the text holds no plan."""
    plan = _parse(request[:MAX_REQUEST_CHARS]).child("plan")
    if plan is None:
        return None
    root = plan.child("root")
    if root is not None:
        steps = _relation_steps(root)
    else:
        command = plan.child("command")
        kind = command.children[0] if command is not None and command.children else None
        if kind is None:
            return None
        source = next((c for c in kind.children if c.name in _INPUT_FIELDS), None)
        steps = [*(_relation_steps(source) if source is not None else []), _label(kind)]
    text = " → ".join(s for s in steps if s)
    if not text:
        return None
    return text if len(text) <= MAX_SUMMARY else "… → " + text[-(MAX_SUMMARY - 4):]


def connect_name(call_site: str, long_call_site: str | None) -> str | None:
    """``Spark Connect: <summary>`` for an operation Spark named after a Connect request, else None."""
    if not call_site.startswith(CONNECT_PREFIX):
        return None
    summary = plan_summary(long_call_site or call_site[len(CONNECT_PREFIX):])
    return f"{CONNECT_NAME}: {summary}" if summary else f"{CONNECT_NAME} request"
