"""How fast the shipped classifiers classify functions: cold (model) and warm (cache).

Usage: python bench/classify_speed.py [--classifier sparse|neural] [--measured data/measured]
       [--corpus crystalperf-training/corpus.jsonl] [--n 2000] [--threads 2]
"cold" includes loading the weights in a fresh process's worth of state (imports excluded) and classifying
``n`` functions never seen; "warm" serves them again from the content-hash cache file. Without a corpus it
classifies the unmistakable snippets of the tests, each varied so that no two are alike. ``--measured DIR``
takes the functions of a measured corpus (the one kept in the repository: real library code, JDK source and
bytecode renderings, Python functions), the first ``n`` distinct ones.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path


def functions_from(corpus: Path | None, n: int, measured: Path | None = None) -> list:  # type: ignore[type-arg]
    from crystalperf.core.attribution.classify import FunctionSource

    if measured is not None:
        from crystalperf.models.evaluate import to_function
        from crystalperf.models.measured import read_measured

        return [to_function(r) for r in read_measured(measured)[:n]]
    if corpus is not None and corpus.is_file():
        from crystalperf.models.corpus import load_corpus
        from crystalperf.models.evaluate import to_function

        rows = load_corpus(corpus)
        return [to_function(rows[i % len(rows)]) for i in range(n)] if rows else []
    import importlib.util

    # The snippets live with the models tests (whose package needs torch): load the file alone.
    path = Path(__file__).resolve().parent.parent / "tests" / "models" / "test_unmistakable.py"
    spec = importlib.util.spec_from_file_location("unmistakable_cases", path)
    assert spec is not None and spec.loader is not None
    cases = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cases)
    return [
        FunctionSource(f"bench.f{i}", lang, code.replace("data", f"data{i}"), "")
        for i in range(n)
        for _, lang, code in [cases.CASES[i % len(cases.CASES)]]
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--classifier", choices=("sparse", "neural"), default="sparse")
    parser.add_argument("--corpus", type=Path, default=Path("crystalperf-training/corpus.jsonl"))
    parser.add_argument("--measured", type=Path, help="a measured corpus directory (e.g. data/measured) instead")
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=2, help="BLAS/OpenMP threads (the target is 2 cores)")
    args = parser.parse_args()
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    from crystalperf.core.attribution.classify import CachedClassifier

    functions = functions_from(args.corpus, args.n, args.measured)
    if args.classifier == "sparse":
        import numpy  # noqa: F401 - imported before the clock starts, as the core's analysis would have

        from crystalperf.models.sparse import SparseClassifier as Classifier
    else:
        from crystalperf.models.classifier import NeuralClassifier as Classifier  # type: ignore[assignment]
    t0 = time.perf_counter()
    classifier = Classifier()
    load_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as cache_dir:
        cached = CachedClassifier(classifier, Path(cache_dir))
        t1 = time.perf_counter()
        cached.classify(functions)
        cold = time.perf_counter() - t1
        fresh = CachedClassifier(classifier, Path(cache_dir))  # a new process would read the cache file like this
        t2 = time.perf_counter()
        fresh.classify(functions)
        warm = time.perf_counter() - t2
    n = len(functions)
    print(f"classifier {classifier.version}, {n} functions, {args.threads} threads, python {sys.version.split()[0]}")
    print(f"model load: {load_s:.3f} s")
    print(f"cold: {cold:.2f} s = {n / cold:,.0f} functions/s ({n / (cold + load_s):,.0f}/s counting the load)")
    print(f"warm (cache): {warm:.3f} s = {n / warm:,.0f} functions/s")


if __name__ == "__main__":
    main()
