"""How fast the shipped neural classifier classifies functions: cold (model) and warm (cache).

Usage: python bench/classify_speed.py [--corpus crystalperf-training/corpus.jsonl] [--n 2000]
Without a corpus it classifies the JDK/stdlib-like snippets of the tests, repeated with variations.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from crystalperf.core.classify import CachedClassifier, FunctionSource
from crystalperf.models.classifier import NeuralClassifier


def functions_from(corpus: Path | None, n: int) -> list[FunctionSource]:
    if corpus is not None and corpus.is_file():
        from crystalperf.models.corpus import load_corpus
        from crystalperf.models.evaluate import to_function

        return [to_function(r) for r in load_corpus(corpus)[:n]]
    import sys

    # The snippets live in the tests; running this file as a script puts bench/ (not the repo) on sys.path.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.models.test_unmistakable import CASES

    return [
        FunctionSource(f"bench.f{i}", lang, code.replace("data", f"data{i}"), "")
        for i in range(n)
        for _, lang, code in [CASES[i % len(CASES)]]
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", type=Path, default=Path("crystalperf-training/corpus.jsonl"))
    parser.add_argument("--n", type=int, default=2000)
    args = parser.parse_args()
    functions = functions_from(args.corpus, args.n)
    t0 = time.perf_counter()
    neural = NeuralClassifier()
    load_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as cache_dir:
        cached = CachedClassifier(neural, Path(cache_dir))
        t1 = time.perf_counter()
        cached.classify(functions)
        cold = time.perf_counter() - t1
        fresh = CachedClassifier(neural, Path(cache_dir))  # a new process would read the cache file like this
        t2 = time.perf_counter()
        fresh.classify(functions)
        warm = time.perf_counter() - t2
    print(f"model load: {load_s:.2f} s ({'code+doc' if neural.doc is not None else 'code only'})")
    print(f"cold: {len(functions)} functions in {cold:.2f} s = {len(functions) / cold:,.0f} functions/s")
    print(
        f"warm (cache): {len(functions)} functions in {warm:.3f} s = {len(functions) / warm:,.0f} functions/s"
    )


if __name__ == "__main__":
    main()
