"""NGAME's fusion: one learned function scores every candidate of a document from the tree's score, the encoder's
cosine and what the label's training data says, so a label no training document carries (no tree score) competes
with the tree's labels on one scale. Fitted by training/label_text/fusion.py; stored as JSON.

Two kinds: a logistic regression (the first bundles' six features), or gradient-boosted trees (sklearn's
HistGradientBoosting, its trees copied into the JSON and walked by a compiled kernel: never a pickle) over the candidate's
ranks and gaps too. On debdeps (bench/RESULTS.md, "label_text_fusion") the ranks and gaps lifted the logistic
regression's P@1 from 74.16 to 75.32 and the trees to 76.85: whether a cosine helps depends on the tree's score and
on the label's frequency, which a linear score cannot say.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from xtag.models.engine.jit import njit
from xtag.models.errors import reading
from xtag.models.files.atomic import write_text_atomic
from xtag.models.inference.beam_search import top_k, top_k_positions

# Every feature models/label_text/model.py `candidates` gives a candidate, one column each in this order; a fusion
# names the ones it reads (its JSON lists them, so a bundle from an older version scores as it did):
# - tree_score: the tree's raw score (0 when the tree did not propose the label), tree_absent: whether it did not;
# - cosine: the document's and the label's embeddings; log_frequency: log(1 + the label's training documents),
#   no_documents: whether it has none; cosine_absent: the cosine of a label the tree did not propose;
# - tree_reciprocal_rank, index_reciprocal_rank: 1 / (1 + its place) in the tree's and in the index's list (0: not
#   in that list); tree_gap: its tree score less the document's best (0 when absent); cosine_gap: its cosine less
#   the document's best cosine; tree_x_cosine; cosine_no_documents: the cosine of a label with no training document.
FEATURES = (
    "tree_score",
    "tree_absent",
    "cosine",
    "log_frequency",
    "no_documents",
    "cosine_absent",
    "tree_reciprocal_rank",
    "index_reciprocal_rank",
    "tree_gap",
    "cosine_gap",
    "tree_x_cosine",
    "cosine_no_documents",
)
LINEAR_FEATURES = FEATURES[:6]
NEW_LABEL_HEAD = 5  # the places before `new_label_places` begin: P@1..P@5 are the fused ranking's own


class BoostedTrees(BaseModel):
    """Regression trees in flat arrays (node i: go to left[i] when x[feature[i]] <= threshold[i], else right[i];
    left[i] = -1: a leaf worth value[i]); a candidate's logit is the sum of its leaves over the trees (roots)."""

    model_config = ConfigDict(extra="forbid")

    roots: list[int]
    feature: list[int]
    threshold: list[float]
    left: list[int]
    right: list[int]
    value: list[float]
    depth: int = Field(ge=0, description="the deepest leaf's depth")

    @model_validator(mode="after")
    def _consistent(self) -> BoostedTrees:
        n = len(self.feature)
        if not all(len(a) == n for a in (self.threshold, self.left, self.right, self.value)):
            raise ValueError("the trees' node arrays differ in length")
        nodes = np.array([*self.roots, *(c for c in (*self.left, *self.right) if c >= 0)], dtype=np.int64)
        if len(nodes) and (nodes.min() < 0 or nodes.max() >= n):
            raise ValueError(f"a tree points outside its {n} nodes")
        if not (np.isfinite(self.threshold).all() and np.isfinite(self.value).all()):
            raise ValueError("a tree's threshold or value is not finite")
        return self

    def arrays(self) -> tuple[np.ndarray, ...]:
        return (
            np.asarray(self.roots, np.int64),
            np.asarray(self.feature, np.int64),
            np.asarray(self.threshold, np.float64),  # the fit compared float64: a float32 threshold could round
            np.asarray(self.left, np.int64),
            np.asarray(self.right, np.int64),
            np.asarray(self.value, np.float32),
        )


class Fusion(BaseModel):
    """label_text/fusion.json: the candidates' widths, the features it reads, and the logistic regression's weights
    per feature or the boosted trees, plus the intercept."""

    model_config = ConfigDict(extra="forbid")

    features: tuple[str, ...] = LINEAR_FEATURES
    weights: list[float] | None = None
    trees: BoostedTrees | None = None
    intercept: float
    tree_candidates: int = Field(20, ge=1, description="K: the tree's top K per document")
    index_candidates: int = Field(20, ge=1, description="M: the label index's top M per document")
    heldout_documents: int = Field(0, ge=0, description="the held-out documents it was fitted on")
    new_label_places: int = Field(
        0, ge=0, description="of a top k, places after the fifth kept for the best labels with no training document"
    )
    fitted_labels: int | None = Field(
        None,
        ge=1,
        description="the labels the fusion was fitted over (None: every label of the index); labels added later "
        "(xtag update --labels) are ranked in a list of their own, so the fitted labels keep their scores",
    )

    @field_validator("features")
    @classmethod
    def _known(cls, features: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [f for f in features if f not in FEATURES]
        if unknown or not features or len(set(features)) != len(features):
            raise ValueError(f"features {list(features)}: each once, of this version's {list(FEATURES)}")
        return features

    @model_validator(mode="after")
    def _one_model(self) -> Fusion:
        if (self.weights is None) == (self.trees is None):
            raise ValueError("a fusion has weights (logistic regression) or trees, exactly one")
        if self.weights is not None and (
            len(self.weights) != len(self.features) or not np.isfinite(self.weights).all()
        ):
            raise ValueError(f"need {len(self.features)} finite weights, got {self.weights}")
        if self.trees is not None and self.trees.feature and max(self.trees.feature) >= len(self.features):
            raise ValueError(f"a tree reads a feature beyond the fusion's {len(self.features)}")
        if not np.isfinite(self.intercept):
            raise ValueError(f"intercept {self.intercept} is not finite")
        return self

    def __init__(self, **data):
        super().__init__(**data)
        self._columns = np.array([FEATURES.index(f) for f in self.features], np.int64)
        self._trees = None if self.trees is None else self.trees.arrays()

    def logits(self, features: np.ndarray) -> np.ndarray:
        """`features` (..., len(FEATURES)), as `candidate_features` gives them; the logits (...)."""
        x = features[..., self._columns].astype(np.float32)
        if self._trees is None:
            return (x @ np.asarray(self.weights, np.float32) + np.float32(self.intercept)).astype(np.float32)
        shape, x = x.shape[:-1], np.ascontiguousarray(x.reshape(-1, x.shape[-1]))
        out = np.empty(x.shape[0], np.float64)
        _walk(x, *self._trees, out)
        return (out + self.intercept).astype(np.float32).reshape(shape)

    def top(self, scores: np.ndarray, labels: np.ndarray, new: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The top k (ids, scores) of each row's candidates (`new`: a candidate with no training document). With
        `new_label_places` q, up to q places after the fifth go to the best new candidates the places before them
        did not take (the plain ranking's next where fewer are left), each with its own score: a label no training
        document carries scores below the tree's labels even when it is true (its cosine alone speaks for it), and
        without these places few reached a top 10 (bench/RESULTS.md, "label_text_fusion")."""
        ids, best = top_k(scores, labels, k)
        q = min(self.new_label_places, max(k - NEW_LABEL_HEAD, 0))
        if not q:
            return ids, best
        head = ids[:, : k - q]
        rest = np.isfinite(scores) & ~(labels[:, :, None] == head[:, None, :]).any(axis=2)
        rows = np.arange(len(scores))[:, None]
        fresh = top_k_positions(np.where(rest & new, scores, -np.inf), q)
        chosen = np.zeros(scores.shape, bool)
        chosen[rows, fresh] = (rest & new)[rows, fresh]
        finite = scores[rest]
        lift = float(finite.max() - finite.min()) + 1.0 if finite.size else 0.0  # chosen ones before the others
        tail = top_k_positions(np.where(rest, scores + lift * chosen, -np.inf), q)
        tail_ids = np.where(rest[rows, tail], labels[rows, tail], -1)
        tail_scores = np.where(tail_ids >= 0, scores[rows, tail], -np.inf)
        return np.concatenate([head, tail_ids], axis=1), np.concatenate([best[:, : k - q], tail_scores], axis=1)

    def save(self, path: Path) -> None:
        write_text_atomic(path, self.model_dump_json(indent=2, exclude_none=True))

    @classmethod
    def load(cls, path: Path) -> Fusion:
        with reading(path, "the label-text fusion"):
            return cls.model_validate_json(path.read_text())


@njit()
def _walk(x, roots, feature, threshold, left, right, value, out):
    """Per row of x: the sum of the leaves its features reach, one per tree (sklearn's decision function less the
    baseline; a float64 sum, as sklearn's). Walked level by level in numpy (every row × tree a step) it took about
    1 ms of a 2.7 ms fused request on debdeps (40 candidates × 100 trees), as long as the label search."""
    for i in range(x.shape[0]):
        total = 0.0
        for t in range(roots.size):
            node = roots[t]
            while left[node] >= 0:
                node = left[node] if x[i, feature[node]] <= threshold[node] else right[node]
            total += value[node]
        out[i] = total


def warm_up() -> float:
    """Compile `_walk` (or load it from numba's cache) before any request; returns the seconds."""
    start = time.perf_counter()
    one = np.zeros(1, np.int64)
    _walk(
        np.zeros((1, 1), np.float32),
        one,
        one,
        np.zeros(1),
        np.full(1, -1),
        np.full(1, -1),
        np.zeros(1, np.float32),
        np.empty(1),
    )
    return time.perf_counter() - start


def candidate_features(
    tree_scores: np.ndarray,
    tree_rank: np.ndarray,
    index_rank: np.ndarray,
    cosine: np.ndarray,
    frequency: np.ndarray,
) -> np.ndarray:
    """(n, C, len(FEATURES)) float32 from (n, C) arrays: the tree's score (0 where absent), the candidate's place in
    the tree's list and in the index's (-1: not there), its cosine and training frequency."""
    absent = (tree_rank < 0).astype(np.float32)
    present = 1.0 - absent
    cosine = cosine.astype(np.float32)
    tree_scores = tree_scores.astype(np.float32) * present
    no_documents = (frequency == 0).astype(np.float32)
    listed = (tree_rank >= 0) | (index_rank >= 0)  # not a padding slot
    best_tree = np.where(absent > 0, -np.inf, tree_scores).max(axis=-1, keepdims=True)
    best_tree = np.where(np.isfinite(best_tree), best_tree, 0.0)
    best_cosine = np.where(listed, cosine, -np.inf).max(axis=-1, keepdims=True)
    best_cosine = np.where(np.isfinite(best_cosine), best_cosine, 0.0)
    return np.stack(
        [
            tree_scores,
            absent,
            cosine,
            np.log1p(frequency).astype(np.float32),
            no_documents,
            cosine * absent,
            np.where(tree_rank >= 0, 1.0 / (1.0 + np.abs(tree_rank)), 0.0),
            np.where(index_rank >= 0, 1.0 / (1.0 + np.abs(index_rank)), 0.0),
            (tree_scores - best_tree) * present,
            cosine - best_cosine,
            tree_scores * cosine,
            cosine * no_documents,
        ],
        axis=-1,
    ).astype(np.float32)
