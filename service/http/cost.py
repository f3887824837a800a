"""What a prediction request will cost, estimated from its parsed body before any work starts, and its refusal.

Issue 38: one 103 KB unauthenticated batch (256 texts, k = 595, beam_size 512, explain) bought minutes of CPU,
+0.8 GB of memory and a 139 MB answer. Every limit it stayed within (documents, k, beam, characters) was
reasonable alone; their product was not. So admission multiplies them out: `request_cost` is the CPU the
request will take, in milliseconds of the machine the model was fitted on, from what is known once the body is
parsed: the documents and their characters, k, the beam (the request's or the bundle's), the tree's levels,
whether it is explained, reweighted (k' = max(5k, 50) candidates and a doubled beam, models/inference/reweighting.py) or
optimised. Over XTAG_MAX_REQUEST_COST it is refused (413 too-costly) before predicting, and so is a request
whose answer would exceed XTAG_MAX_RESPONSE_BYTES (`response_bytes`, explanations included).

The model is linear in FEATURES (each a count of work items: documents, characters, beam nodes scored, labels
kept, labels explained × levels, ...), so it is cheap: a few multiplications and one len() per text, nothing
that grows with the labels. Characters stand for words: counting words would cost a pass over up to 2 MB of
text on the event loop, while len() is free and tracks the featuriser's work as well.

COEFFICIENTS were fitted (non-negative least squares on relative error) by bench/request_cost.py to the CPU time
(time.process_time, all threads) that the service's own code path took in-process, for a grid of documents,
text length, k, beam, explain, reweight and optimize on the debtags (595 labels, 2 levels) and debdeps (36,395
labels, 4 levels) XR-Linear bundles; bench/results/request_cost.json has the grid, the fit and how far each
point's estimate is from its measurement. Over the 81 points, every request that took 50 ms or more (26, up to
2.2 s) was estimated within 2x (0.51-1.51 of its CPU); below some 20 ms fixed costs (a parallel region's thread
wake-ups) dominate and the estimate can be several times low, which is nothing against a budget of a second. A faster or slower machine
scales every cost alike, which is what XTAG_MAX_REQUEST_COST is for. Encoder bundles (XR-Transformer, LightXML,
CascadeXML, LaMP) also pay their transformer per document, which this model, fitted on XR-Linear, does not
count: for them the budget bounds the beam, labels and explanations, not the encoder.
"""

from __future__ import annotations

from dataclasses import dataclass

from xtag.models.inference.macro_optimal import SERVING_MAX_SECONDS
from xtag.models.inference.reweighting import candidate_budget
from xtag.service.http.problems import Problem

# The work counts the cost is linear in, in the order of COEFFICIENTS.
FEATURES = (
    "documents",
    "characters",
    "scored nodes (documents × tree nodes the beam search scores)",
    "candidates (documents × candidate labels × levels)",
    "labels (documents × k)",
    "explained requests (1 with explain: the explainer's fixed cost per call)",
    "explained levels (documents × k × levels)",
    "explained characters (characters × k × levels)",
    "optimized candidates (documents × candidate labels)",
)
# Estimated CPU milliseconds per unit of each feature: bench/request_cost.py's fit (see the module docstring).
COEFFICIENTS = (0.05608, 8.752e-05, 5.585e-06, 0.0001597, 0, 3.518, 0.0333, 9.592e-08, 0)
# Estimated response bytes per explained label, and per explained label and level: the same fit's.
EXPLAINED_BYTES = (237, 338)
SCORE_BYTES = 22  # a score's digits and the separators around a label object (float64 repr: up to 20 digits)


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

    def features(self) -> tuple[float, ...]:
        """The FEATURES of this request (see there)."""
        n, levels = self.documents, len(self.level_nodes)
        candidates, beam = self.k, self.beam
        if self.reweight or self.optimize:  # both widen the beam search (models/inference/reweighting.py)
            candidates, beam = candidate_budget(self.k, self.beam, self.level_nodes[-1])
        explained = n * self.k * levels if self.explain else 0
        return (
            n,
            self.characters,
            n * scored_nodes(self.level_nodes, beam),
            n * candidates * levels,
            n * self.k,
            1 if self.explain else 0,
            explained,
            self.characters * self.k * levels if self.explain else 0,
            n * candidates if self.optimize else 0,
        )

    def cost(self) -> float:
        """Estimated CPU milliseconds; the optimisation's share stops at its time cap (SERVING_MAX_SECONDS)."""
        shares = [f * c for f, c in zip(self.features(), COEFFICIENTS)]  # 8 numbers: faster than numpy
        shares[-1] = min(shares[-1], SERVING_MAX_SECONDS * 1e3)
        return sum(shares)


def scored_nodes(level_nodes: tuple[int, ...], beam: int) -> int:
    """Nodes the beam search scores per document: all of the first level, then at each level the children of
    the `beam` nodes kept (a level's mean branching), at most the whole level."""
    total = level_nodes[0]
    for parents, nodes in zip(level_nodes, level_nodes[1:]):
        total += min(nodes, beam * nodes / max(parents, 1))
    return int(total)


def tree_shape(predictor) -> tuple[int, ...]:
    """Nodes per level of the bundle's label tree (a LaMP bundle's first stage's); (labels,) without a tree."""
    model = predictor.model
    model = getattr(getattr(model, "first", None), "model", model)
    levels = getattr(model, "levels", None)
    return tuple(int(level.W.shape[0]) for level in levels) if levels else (predictor.n_labels,)


def label_bytes(names: list[str]) -> float:
    """Mean bytes of one `{"id":…,"name":"…","score":…}` in a response, for this label set."""
    if not names:
        return 0.0
    name_bytes = sum(len(n.encode()) for n in names) / len(names)
    return len('{"id":,"name":"","score":}') + len(str(len(names))) + name_bytes + SCORE_BYTES


def response_bytes(work: Work, per_label: float) -> float:
    """Estimated bytes of the answer: every returned label (threshold not counted), with its explanation."""
    labels = work.documents * work.k
    size = labels * per_label
    if work.explain:
        size += labels * (EXPLAINED_BYTES[0] + EXPLAINED_BYTES[1] * len(work.level_nodes))
    return size


def check_work(work: Work, per_label: float, max_cost: float, max_bytes: int) -> None:
    """413 too-costly when the request would cost more than `max_cost` or answer more than `max_bytes`, with
    what it costs, the limit, the setting that raises it and what to change."""
    cost = work.cost()
    if max_cost and cost > max_cost:
        raise Problem(
            413,
            "too-costly",
            f"this request would cost about {cost:,.0f} units (estimated CPU ms) and the limit is {max_cost:,.0f} "
            f"(XTAG_MAX_REQUEST_COST); {_hint(work)}",
            cost=round(cost, 1),
            limit=max_cost,
        )
    size = response_bytes(work, per_label)
    if max_bytes and size > max_bytes:
        raise Problem(
            413,
            "too-costly",
            f"this request's answer would be about {size / 1e6:,.1f} MB and the limit is {max_bytes / 1e6:,.1f} MB "
            f"(XTAG_MAX_RESPONSE_BYTES={max_bytes}); {_hint(work)}",
            response_bytes=round(size),
            limit=max_bytes,
        )


def _hint(work: Work) -> str:
    """What the client can change, largest lever first."""
    levers = [f"fewer documents (sent {work.documents})"] if work.documents > 1 else []
    levers.append(f"a smaller k (asked {work.k})")
    if work.explain:
        levers.append("no explain, or explain fewer documents per request")
    if work.reweight or work.optimize:
        levers.append("no reweight/optimize (they widen the beam search)")
    return "send " + ", ".join(levers)
