"""One analysis, used by the CLI and by every hook at job end: the trace through the stages in order —
attribution, profile, what-ifs, report — and the report's files. Anything the report shows is computed here from
the trace alone."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx

from crystalperf.core import collector
from crystalperf.core import trace as tr
from crystalperf.core.attribution.attribute import attribute
from crystalperf.core.attribution.classify import ResourceClassifier, load_classifier
from crystalperf.core.attribution.confidence import attach_confidence
from crystalperf.core.attribution.vectors import ATTRIBUTION_EVIDENCE
from crystalperf.core.errors import BadInputError
from crystalperf.core.parallel import MIN_OPERATIONS, Beside
from crystalperf.core.predict import Changes, Prediction, Predictor
from crystalperf.core.predict.balance import predict_balanced
from crystalperf.core.predict.settings import SettingsSearch
from crystalperf.core.predict.whatifs import predict_scenarios, take_pace
from crystalperf.core.profile.bottleneck import Bottleneck, find_bottleneck
from crystalperf.core.profile.dag import ExecutionProfile, profile_of
from crystalperf.core.profile.machine import traced_slots
from crystalperf.core.profile.skew import find_skew
from crystalperf.core.profile.sqlplan import sql_operators
from crystalperf.core.report.document import TOP_FUNCTIONS, ReportParts, build_report, report_parts

log = logging.getLogger(__name__)



@dataclass
class Analysis:
    trace: tr.Trace
    profile: ExecutionProfile
    bottleneck: Bottleneck
    predictions: list[Prediction]
    report: dict[str, Any]
    files: list[Path] = field(default_factory=list)
    seconds: float = 0.0


def analyze(
    trace: tr.Trace,
    *,
    classifier: ResourceClassifier | None = None,
    scenarios: Sequence[Changes] | None = None,
    locators: Sequence[object] | None = None,
    source_roots: Sequence[str] = (),
    band: bool = True,
    reclassify: bool = False,
    attribution: str = ATTRIBUTION_EVIDENCE,
) -> Analysis:
    """Analyse a trace in memory; writes nothing. ``reclassify`` ignores the functions and vectors the
    trace embeds from its job-end analysis and locates and classifies every stack again. ``attribution``
    "paper" attributes samples as the paper does (first located frame, classifier only), for comparison.

    The stages in order: attribution (every operation's vector), the profile (the DAG, its critical path and
    bottleneck, skew, SQL operators), the what-ifs, the report document."""
    started = time.perf_counter()
    classifier = classifier or load_classifier()
    with collector.paused():
        try:
            attributed = attribute(trace, classifier, locators=locators, source_roots=source_roots,
                                   reclassify=reclassify, attribution=attribution)
            # only for the functions the report shows: without a cache, each confidence is a classification
            attach_confidence((f for v in attributed.vectors.values() for f in v.functions[:TOP_FUNCTIONS]),
                              classifier)
            profile = profile_of(trace, attributed)
        except (ValueError, nx.NetworkXException) as exc:
            raise BadInputError(f"inconsistent trace: {exc}") from None
        bottleneck = find_bottleneck(profile)
        skew = find_skew(profile, traced_slots(trace).slots)
        # Spark SQL: each stage's samples given to the plan operators that ran them.
        queries = sql_operators(trace, profile.resolution, {p.op.id: p.vector.vector for p in profile.walk()})

        made: list[Predictor] = []  # the process's predictor, once made

        def predict() -> tuple[list[Prediction], SettingsSearch]:
            # Alone, the process's predictor; in a child forked before it was made, one of the child's own.
            return predict_scenarios(made[0] if made else Predictor(profile), scenarios, band=band)

        # On a large job the scenarios are predicted on a second core while the report's operations are written
        # out (crystalperf.core.parallel); on a small one, in order.
        parts: ReportParts | None = None
        with Beside(predict, worth=len(profile.by_path) >= MIN_OPERATIONS) as predicting:
            predictor = Predictor(profile)
            made.append(predictor)
            take_pace(bottleneck, predictor)
            predict_balanced(profile, skew)
            if predicting.forked:
                parts = report_parts(profile, bottleneck, queries, skew)
            predictions, settings = predicting.result()
        if parts is None:
            parts = report_parts(profile, bottleneck, queries, skew)
        report = build_report(profile, bottleneck, predictions, predictor, settings, parts)
    return Analysis(trace, profile, bottleneck, predictions, report, seconds=time.perf_counter() - started)


def analyze_path(
    trace_path: str | Path,
    out_dir: str | Path | None = None,
    *,
    classifier: ResourceClassifier | None = None,
    formats: Sequence[str] = ("json", "html"),
    scenarios: Sequence[Changes] | None = None,
    source_roots: Sequence[str] = (),
    reclassify: bool = False,
    attribution: str = ATTRIBUTION_EVIDENCE,
) -> Analysis:
    """Load a trace file, analyse it and write the report files next to it (or into ``out_dir``)."""
    from crystalperf.core.report import write_reports

    trace_path = Path(trace_path)
    trace = tr.load_trace(trace_path)
    from crystalperf.core.limits import is_directory

    target = Path(out_dir) if out_dir is not None else (trace_path if is_directory(trace_path) else trace_path.parent)
    with collector.paused():  # the report's files too: rendering them allocates as much as the analysis
        try:
            result = analyze(trace, classifier=classifier, scenarios=scenarios, source_roots=source_roots,
                             reclassify=reclassify, attribution=attribution)
        except BadInputError as exc:
            raise BadInputError(exc.problem, trace_path) from None
        try:
            result.files = write_reports(result.report, target, formats)
        except OSError as exc:  # a full disk, a read-only directory: the user's to fix, named in one line
            raise BadInputError(f"cannot write the report: {exc.strerror or exc}", exc.filename or target) from None
    return result
