"""The fleet table as Parquet: one row per log, the columns of :data:`crystalperf.fleet.row.COLUMNS`.

Rows are written as they come, a row group at a time, so the table of any fleet is written in bounded memory.
pyarrow is the ``fleet`` extra: without it the fleet says so in one line before it analyses anything.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from crystalperf.core.errors import BadInputError
from crystalperf.fleet.row import COLUMNS

ROW_GROUP = 2048
SCHEMA_METADATA = {b"crystalperf.fleet": b"one row per application log; columns documented in docs/fleet.md"}


def require_pyarrow() -> Any:
    """pyarrow (with its Parquet module), or one line naming the extra that installs it."""
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise BadInputError("the fleet table is Parquet, and pyarrow is not installed: "
                            "pip install 'crystalperf[fleet]'") from None
    return pyarrow


def schema() -> Any:
    pa = require_pyarrow()
    types = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_(),
             "timestamp": pa.timestamp("ms", tz="UTC"), "list<string>": pa.list_(pa.string())}
    fields = [pa.field(c.name, types[c.type], metadata={b"doc": c.doc.encode()}) for c in COLUMNS]
    return pa.schema(fields, metadata=SCHEMA_METADATA)


def _column(rows: list[dict[str, Any]], name: str, kind: str) -> list[Any]:
    values = [row.get(name) for row in rows]
    if kind == "timestamp":  # epoch seconds in the rows; milliseconds in the table
        return [None if v is None else round(v * 1000) for v in values]
    return values


class TableWriter:
    """Rows in, a Parquet file out (``close`` finishes it; written to a temporary name and renamed)."""

    def __init__(self, path: Path) -> None:
        pa = require_pyarrow()
        import pyarrow.parquet as pq

        self.pa = pa
        self.path = Path(path)
        self.tmp = self.path.with_name(f".{self.path.name}.tmp")
        self.schema = schema()
        self.writer = pq.ParquetWriter(self.tmp, self.schema, compression="zstd")
        self.buffer: list[dict[str, Any]] = []
        self.rows = 0

    def add(self, row: dict[str, Any]) -> None:
        self.buffer.append(row)
        if len(self.buffer) >= ROW_GROUP:
            self._flush()

    def _flush(self) -> None:
        if not self.buffer:
            return
        arrays = [self.pa.array(_column(self.buffer, c.name, c.type), type=self.schema.field(c.name).type)
                  for c in COLUMNS]
        self.writer.write_table(self.pa.Table.from_arrays(arrays, schema=self.schema))
        self.rows += len(self.buffer)
        self.buffer = []

    def close(self) -> None:
        self._flush()
        self.writer.close()
        self.tmp.replace(self.path)

    def abort(self) -> None:
        self.writer.close()
        self.tmp.unlink(missing_ok=True)


def write_table(rows: Iterable[dict[str, Any]], path: Path) -> int:
    """Write every row; the number written."""
    writer = TableWriter(path)
    try:
        for row in rows:
            writer.add(row)
    except BaseException:
        writer.abort()
        raise
    writer.close()
    return writer.rows
