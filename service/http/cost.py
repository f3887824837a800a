"""What a prediction request will cost, estimated from its parsed body before any work starts, and its refusal.

Issue 38: one 103 KB unauthenticated batch (256 texts, k = 595, beam_size 512, explain) bought minutes of CPU,
+0.8 GB of memory and a 139 MB answer. Every limit it stayed within (documents, k, beam, characters) was
reasonable alone; their product was not. So admission multiplies them out: `request_cost` is the CPU the
request will take, in milliseconds of the machine the model was fitted on, from what is known once the body is
parsed: the documents and their characters, k, the beam (the request's or the bundle's), the tree's levels,
whether it is explained, reweighted (k' = max(5k, 50) candidates and a doubled beam, models/inference/reweighting.py) or
optimised, and what its label filters fetch (k + |exclude|, or a widened search) or score label by label (a small
include, counted as explained label levels: the same path walk). Over XTAG_MAX_REQUEST_COST it is refused (413 too-costly) before predicting, and so is a request
whose answer would exceed XTAG_MAX_RESPONSE_BYTES (`response_bytes`, explanations included).

The model is linear in FEATURES (each a count of work items: documents, characters, beam nodes scored, labels
kept, labels explained × levels, a re-ranker's candidates and their pairs, ...), so it is cheap: a few
multiplications and one len() per text, nothing that grows with the labels. Characters stand for words:
counting words would cost a pass over up to 2 MB of text on the event loop, while len() is free and tracks the
featuriser's work as well.

Issue 47: fitted on XR-Linear alone, the estimate was 14-28x low for explain and LaMP (a 1 MB batch of 10 texts of
99,000 characters explained at k 595: estimated 0.6 s, 8-17 s of CPU and +400 MB). So each family declares its
serving-cost profile (Model.cost_hint: "linear", "encoder", "lamp", and a re-ranker's C), and each profile has
its own COEFFICIENTS (CPU ms) and MEMORY (peak MB), fitted by bench/request_cost.py to measured requests up to
99,000 characters a text, explained, reweighted, optimised and Annif's, and raised until every measured request
of 10 ms or more is estimated at no less than half its CPU and no less than its memory (bench/RESULTS.md, "The
cost bound per family"). Over XTAG_MAX_REQUEST_MEMORY_MB a request is refused like one over the cost. The
estimate is checked after the work as well (CostMeter): a request whose thread CPU exceeded twice its estimate
is logged and counted (xtag_cost_underestimated_requests). A faster or slower machine scales every cost alike,
which is what XTAG_MAX_REQUEST_COST is for; "encoder" was fitted with a tiny frozen encoder, so a large one is
under-counted per document: raise its bound with the machine's own measurement (bench/request_cost.py --bundle).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson
from xtag.models.inference.macro_optimal import SERVING_MAX_SECONDS
from xtag.models.inference.model import CostHint
from xtag.models.inference.predictor import Predictor
from xtag.models.inference.reweighting import candidate_budget
from xtag.models.label_texts import LabelTexts, shown_fields
from xtag.service.http.problems import Problem

log = logging.getLogger("xtag.service")
METER_KEY = "xtag.cost_meter"  # a request's CostMeter, in its ASGI scope
CHECK_FACTOR = 2.0  # a request whose measured CPU exceeds this × its estimate is logged and counted
CHECK_MIN_MS = 10.0  # ... when it took at least this: below it the fit promises nothing (timer and cache noise)

# The work counts the cost is linear in, in the order of each profile's COEFFICIENTS and MEMORY.
FEATURES = (
    "requests (1: a call's fixed cost)",
    "documents",
    "characters",
    "scored nodes (documents × tree nodes the beam search scores)",
    "candidates (documents × candidate labels × levels)",
    "labels (documents × k)",
    "explained requests (1 with explain: the explainer's fixed cost per call)",
    "explained levels (documents × k × levels)",
    "explained characters (characters × k × levels)",
    "optimized candidates (documents × candidate labels)",
    "re-scored (documents × max(C, k): a re-ranker's candidates)",
    "re-scored pairs (documents × max(C, k)²: its label-to-label attention)",
    "explained pairs (documents × max(C, k)² with explain: the attention outputs fetched)",
    "Annif labels (documents × k as Annif's dicts)",
)
# Per serving-cost profile (Model.cost_hint, models/inference/model.py): estimated CPU milliseconds, and peak
# memory in MB, per unit of each feature. bench/request_cost.py's fit, raised so that every measured request's
# CPU estimate is at least half its measurement and its memory estimate at least its peak
# (bench/results/request_cost_{xlinear,encoder,lamp}.json). "encoder" was measured on an
# XR-Transformer over a frozen tiny BERT: a larger encoder costs more per document than it counts.
COEFFICIENTS = {
    "linear": (
        4.43,
        0,
        0.000197,
        6.192e-05,
        0.0002432,
        0.0003258,
        1.915,
        0.06102,
        3.806e-06,
        0.0001819,
        0,
        0,
        0,
        0.002615,
    ),
    "encoder": (3.015, 0, 0.0008633, 0.002433, 0.0001611, 0.001258, 4.835, 0.1152, 2.447e-06, 0, 0, 0, 0, 0.05862),
    "lamp": (4.892, 0, 0.001127, 0.00324, 8.281e-05, 0.02202, 4.794, 0.2394, 1.099e-05, 0.01456, 0, 4.809e-05, 0, 0),
}
MEMORY = {
    "linear": (
        1.778,
        0,
        1.42e-05,
        1.053e-05,
        4.285e-05,
        0.0001045,
        0,
        0.001317,
        1.94e-08,
        7.034e-06,
        0,
        0,
        0,
        0.0006393,
    ),
    "encoder": (1.016, 0, 9.513e-05, 0, 5.124e-05, 3.52e-05, 0.4029, 0.002047, 6.057e-08, 1.734e-05, 0, 0, 0, 0),
    "lamp": (4.388, 0, 0.0002572, 0, 0, 5.498e-05, 5.748, 0.006838, 2.206e-07, 0, 0, 6.883e-06, 3.927e-06, 0),
}
# Response bytes per explained label, and per explained label and level, per profile: the same fit's, raised
# until no measured answer was larger.
EXPLAINED_BYTES = {"linear": (0, 499), "encoder": (0, 498), "lamp": (0, 737)}
SCORE_BYTES = 22  # a score's digits and the separators around a label object (float64 repr: up to 20 digits)
GAIN_BYTES = len(',"gain":') + 22  # a reweighted label's gain, its digits as a score's


@dataclass(frozen=True)
class Work:
    """What a request asks for, as the cost model counts it."""

    documents: int
    characters: int
    k: int
    beam: int  # the beam the request runs with: its own or the bundle's
    level_nodes: tuple[int, ...]  # nodes per level of the label tree, root's children first (tree_shape)
    explain: bool = False
    reweight: bool = False
    optimize: bool = False
    hint: CostHint = CostHint()  # the bundle's serving-cost profile (Predictor.cost_hint)
    annif: bool = False  # answered as Annif's {uri, label, notation, score} dicts
    fetch: int = 0  # labels a filtered search fetches per document (models/inference/label_filter.search_width)
    scored_labels: int = 0  # labels an exact `include` scores one by one per document (the same search_width)

    def features(self) -> tuple[float, ...]:
        """The FEATURES of this request (see there)."""
        n, levels = self.documents, len(self.level_nodes)
        candidates, beam = self.k, self.beam
        if self.reweight or self.optimize:  # both widen the beam search (models/inference/reweighting.py)
            candidates, beam = candidate_budget(max(self.k, self.fetch), self.beam, self.level_nodes[-1])
        candidates = max(candidates, self.fetch)  # `exclude`/`include` over-fetch (models/inference/label_filter.py)
        width = max(self.hint.candidates, candidates) if self.hint.candidates else 0  # LaMP's first stage's top
        if width:
            candidates = width
        explained = n * self.k * levels if self.explain else 0
        # an include scored label by label walks each label's path as an explanation does (models/xlinear/readable.py
        # shared_features, for both): counted as explained levels, which overestimates it about 3x (debdeps)
        explained += n * self.scored_labels * levels
        return (
            1,
            n,
            self.characters,
            n * scored_nodes(self.level_nodes, beam),
            n * candidates * levels,
            n * self.k,
            1 if self.explain else 0,
            explained,
            self.characters * self.k * levels if self.explain else 0,
            n * candidates if self.optimize else 0,
            n * width,
            n * width * width,
            n * width * width if self.explain else 0,
            n * self.k if self.annif else 0,
        )

    def _linear(self, table: dict[str, tuple[float, ...]]) -> list[float]:
        return [f * c for f, c in zip(self.features(), table.get(self.hint.family, table["linear"]))]

    def cost(self) -> float:
        """Estimated CPU milliseconds; the optimisation's share stops at its time cap (SERVING_MAX_SECONDS)."""
        shares = self._linear(COEFFICIENTS)  # 14 numbers: faster than numpy
        shares[9] = min(shares[9], SERVING_MAX_SECONDS * 1e3)
        return sum(shares)

    def memory_mb(self) -> float:
        """Estimated peak memory the request adds, in MB (its arrays, explanations and answer while built)."""
        return sum(self._linear(MEMORY))


def scored_nodes(level_nodes: tuple[int, ...], beam: int) -> int:
    """Nodes the beam search scores per document: all of the first level, then at each level the children of
    the `beam` nodes kept (a level's mean branching), at most the whole level."""
    total = level_nodes[0]
    for parents, nodes in zip(level_nodes, level_nodes[1:]):
        total += min(nodes, beam * nodes / max(parents, 1))
    return int(total)


def tree_shape(predictor: Predictor) -> tuple[int, ...]:
    """Nodes per level of the bundle's label tree, as its model declares it (Model.cost_hint; a LaMP bundle's
    first stage's); (labels,) without a tree."""
    return predictor.cost_hint().level_nodes or (predictor.n_labels,)


def label_bytes(names: list[str]) -> float:
    """Mean bytes of one `{"id":…,"name":"…","score":…}` in a response, for this label set."""
    if not names:
        return 0.0
    name_bytes = sum(len(n.encode()) for n in names) / len(names)
    return len('{"id":,"name":"","score":}') + len(str(len(names))) + name_bytes + SCORE_BYTES


def text_bytes(texts: LabelTexts, names: list[str]) -> float:
    """Mean bytes a `label_text` request adds to one label of this label set: `"label":"…","description":"…",`."""
    if not names:
        return 0.0
    return sum(len(orjson.dumps(shown_fields(texts, n))) for n in names) / len(names)  # {…} for …,


def response_bytes(work: Work, per_label: float) -> float:
    """Estimated bytes of the answer: every returned label (threshold not counted), with its gain when
    reweighted, as Annif's dicts on the Annif routes, and with its explanation."""
    labels = work.documents * work.k
    if work.annif:  # `per_label` is then an Annif result's (routes/annif.py: the name twice, the uri's prefix)
        return labels * per_label
    size = labels * (per_label + (GAIN_BYTES if work.reweight else 0))
    if work.explain:
        per = EXPLAINED_BYTES.get(work.hint.family, EXPLAINED_BYTES["linear"])
        size += labels * (per[0] + per[1] * len(work.level_nodes))
    return size


def check_work(work: Work, per_label: float, max_cost: float, max_bytes: int, max_memory_mb: float = 0) -> CostMeter:
    """413 too-costly when the request would cost more than `max_cost`, hold more than `max_memory_mb` or answer
    more than `max_bytes`, with what it costs, the limit, the setting that raises it and what to change; else
    the CostMeter that checks the estimate once the work is done."""
    cost = work.cost()
    if max_cost and cost > max_cost:
        raise Problem(
            413,
            "too-costly",
            f"this request would cost about {cost:,.0f} units (estimated CPU ms) and the limit is {max_cost:,.0f} "
            f"(XTAG_MAX_REQUEST_COST); {hint(work)}",
            cost=round(cost, 1),
            limit=max_cost,
        )
    memory = work.memory_mb()
    if max_memory_mb and memory > max_memory_mb:
        raise Problem(
            413,
            "too-costly",
            f"this request would take about {memory:,.0f} MB of memory and the limit is {max_memory_mb:,.0f} MB "
            f"(XTAG_MAX_REQUEST_MEMORY_MB); {hint(work)}",
            memory_mb=round(memory, 1),
            limit=max_memory_mb,
        )
    size = response_bytes(work, per_label)
    if max_bytes and size > max_bytes:
        raise too_large(size, max_bytes, hint(work))
    return CostMeter(work, cost, work.documents)


def too_large(size: float, max_bytes: int, levers: str) -> Problem:
    """413 too-costly for an answer over XTAG_MAX_RESPONSE_BYTES: estimated before the work, or encoded after it."""
    return Problem(
        413,
        "too-costly",
        f"this request's answer would be about {size / 1e6:,.1f} MB and the limit is {max_bytes / 1e6:,.1f} MB "
        f"(XTAG_MAX_RESPONSE_BYTES={max_bytes}); {levers}",
        response_bytes=round(size),
        limit=max_bytes,
    )


def hint(work: Work) -> str:
    """What the client can change, largest lever first."""
    levers = [f"fewer documents (sent {work.documents})"] if work.documents > 1 else []
    levers.append(f"a smaller k (asked {work.k})")
    if work.explain:
        levers.append("no explain, or explain fewer documents per request")
    if work.reweight or work.optimize:
        levers.append("no reweight/optimize (they widen the beam search)")
    return "send " + ", ".join(levers)


@dataclass
class CostMeter:
    """The CPU a request's work took, measured where it runs, to check its estimate after the fact.

    Each call wrapped by `wrap` adds the thread CPU time (time.thread_time) of the thread that ran it: the
    predictor call, the explanation, the optimisation. A micro-batch that merged other requests' texts counts
    this request's share of it (its texts over the batch's). The pools an engine or onnxruntime starts are not
    counted (their threads are not this one), so the check can only err towards silence."""

    work: Work
    estimate_ms: float
    documents: int
    cpu_s: float = field(default=0.0)

    def wrap(self, fn: Callable) -> Callable:
        def measured(texts, *args, **kwargs):
            start = time.thread_time()
            try:
                return fn(texts, *args, **kwargs)
            finally:
                share = min(1.0, self.documents / max(len(texts), 1))
                self.cpu_s += (time.thread_time() - start) * share

        return measured

    def check(self, model: str, counter=None) -> bool:
        """Log, and count in `counter` (xtag_cost_underestimated_requests), a request that took more than
        CHECK_FACTOR × its estimate and CHECK_MIN_MS; True when it did."""
        measured_ms = self.cpu_s * 1e3
        if measured_ms <= max(CHECK_FACTOR * self.estimate_ms, CHECK_MIN_MS):
            return False
        w = self.work
        log.warning(
            "cost estimate exceeded: %.0f CPU ms measured against %.0f estimated (%.1fx) on %s (%s profile): "
            "%d documents, %d characters, k %d, beam %d, explain %s, reweight %s, optimize %s, annif %s",
            measured_ms,
            self.estimate_ms,
            measured_ms / max(self.estimate_ms, 1e-9),
            model,
            w.hint.family,
            w.documents,
            w.characters,
            w.k,
            w.beam,
            w.explain,
            w.reweight,
            w.optimize,
            w.annif,
        )
        if counter is not None:
            counter.inc()
        return True
