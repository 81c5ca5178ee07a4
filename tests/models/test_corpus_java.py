"""Building the corpus from Java sources: extraction needs the tree-sitter grammars of the models extra."""

from __future__ import annotations

import zipfile
from pathlib import Path

from crystalperf.models.corpus import build_corpus


def test_build_corpus_from_a_small_src_zip(tmp_path: Path) -> None:
    java = """package java.net;
class SocketOutputStream {
    /** Writes to the socket. */
    private void socketWrite(byte[] b, int off, int len) throws IOException {
        while (len > 0) {
            int n = socketWrite0(fd, b, off, len);
            off += n; len -= n;
        }
    }
}"""
    src = tmp_path / "src.zip"
    with zipfile.ZipFile(src, "w") as zf:
        zf.writestr("java.base/java/net/SocketOutputStream.java", java)
    empty = tmp_path / "stdlib"
    empty.mkdir()
    records = build_corpus(
        tmp_path / "corpus.jsonl", jdk_src_zip=src, python_stdlib=empty, doctext_path=tmp_path / "doc.txt"
    )
    assert [(r["qualified_name"], r["label"], r["doc"], r["library"]) for r in records] == [
        ("java.net.SocketOutputStream.socketWrite", "network", "Writes to the socket.", "jdk:java.net")
    ]
    assert (tmp_path / "corpus.jsonl").read_text().count("\n") == 1
    assert "Writes to the socket." in (tmp_path / "doc.txt").read_text()
