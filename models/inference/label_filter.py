"""Per-document label filters: the top k among the labels a document may get, for every family.

A filter excludes labels (`exclude`) and/or allows only some (`include`), by label position. The model itself
only ever sees `k` and `beam_size`, so one rule serves every family (Predictor.predict, and through it the
service, `xtag predict`, `xtag evaluate` and the Ray batch scorer):

- exclude only: the search is asked for k + |exclude| labels (at most the label count) and the excluded ones are
  dropped. Exact with respect to the search: the answer is the top k of the allowed labels the unfiltered search
  reaches with the same beam (an excluded label frees no room in the beam for others).
- include of at most EXACT_INCLUDE_MAX labels, on a family that scores single labels (Model.score_labels:
  XR-Linear and XR-Transformer's linear rankers, each label's path through the tree): exactly those labels are
  scored, whatever the beam would have kept; the answer is their exact top k.
- any other include (a larger one, or a family that cannot score a label outside its search: LightXML,
  CascadeXML, LaMP): the search is widened as reweighting widens it (models/inference/reweighting.py
  candidate_budget: k' = max(5k, 50) candidates, the beam doubled) and the included labels among its candidates
  are kept. Not exact: an included label the widened search does not reach is missing.

Fewer than k allowed labels answer with what there is: the rest is padding (label -1, score -inf), as the beam
search pads; a score is never NaN.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from xtag.models.inference.reweighting import candidate_budget
from xtag.models.inference.types import Predictions
from xtag.models.label_texts import LabelTexts
from xtag.models.labels import LabelVocab

EXACT_INCLUDE_MAX = 1000  # an include of up to this many labels is scored label by label where the family can
NO_LABELS = np.empty(0, np.int64)


@dataclass(frozen=True)
class LabelFilter:
    """Which labels one document may get: none of `exclude`, and only `include` when it is given (positions in
    the bundle's vocabulary, sorted and unique: `of` makes them so)."""

    exclude: np.ndarray = field(default_factory=lambda: NO_LABELS)
    include: np.ndarray | None = None

    @classmethod
    def of(cls, exclude: Iterable[int] = (), include: Iterable[int] | None = None) -> LabelFilter:
        return cls(_positions(exclude), None if include is None else _positions(include))

    def allowed(self, labels: np.ndarray) -> np.ndarray:
        """Which of `labels` (padding -1 included, never allowed) the filter lets through."""
        keep = (labels >= 0) & ~np.isin(labels, self.exclude)
        return keep if self.include is None else keep & np.isin(labels, self.include)

    def labels(self) -> np.ndarray:
        """An include's labels less the excluded ones (only for a filter with an include)."""
        return np.setdiff1d(self.include, self.exclude, assume_unique=True)


def _positions(ids: Iterable[int]) -> np.ndarray:
    return np.unique(np.fromiter(ids, np.int64))


def own_positions(ids: Sequence[object], index: Mapping[str, int]) -> np.ndarray:
    """Each document's own label: the position (in `index`, name → position) of the label named as the document's
    id, else -1. A package never depends on itself: `--exclude-self`, the label-text stage's fusion fit and its
    encoder's masks all ask this one question."""
    return np.array([index.get(str(i), -1) for i in ids], dtype=np.int64)


def self_filters(ids: Sequence[object], vocab: LabelVocab) -> list[LabelFilter | None]:
    """`--exclude-self`: each document whose id is a label's name may not get that label; other documents are not
    filtered."""
    return [None if j < 0 else LabelFilter(np.array([j], np.int64)) for j in own_positions(ids, vocab.index)]


def label_positions(
    refs: Iterable[int | str], vocab: LabelVocab, label_texts: LabelTexts | None
) -> tuple[np.ndarray, list[int | str]]:
    """The positions a request's label references name, and the references that name no label.

    A reference is a label's position (an integer, as `id` in answers) or its name (a string, as `name`). With
    the bundle's label texts, a label that has narrower labels (`broader` in the label file) brings its whole
    branch (LabelTexts.branch); a narrower label the model has no ranker for is skipped."""
    positions, unknown = [], []
    for ref in refs:
        j = (ref if 0 <= ref < len(vocab) else None) if isinstance(ref, int) else vocab.index.get(ref)
        if j is None:
            unknown.append(ref)
        else:
            positions.append(j)
    if label_texts is not None and positions:
        names = [vocab.names[j] for j in positions if vocab.names[j] in label_texts]
        positions.extend(vocab.index[n] for n in label_texts.branch(names) if n in vocab.index)
    return np.unique(np.asarray(positions, np.int64)), unknown


def plan(f: LabelFilter | None, k: int, beam: int, n_labels: int, exact: bool) -> tuple[str, int, int]:
    """How one document is predicted: ("plain" | "search" | "exact", the k asked of the search, its beam)."""
    if f is None or (not f.exclude.size and f.include is None):
        return "plain", k, beam
    if f.include is not None and exact and f.include.size <= EXACT_INCLUDE_MAX:
        return "exact", k, beam
    fetch = min(n_labels, k + int(f.exclude.size))
    if f.include is None:
        return "search", fetch, beam
    return ("search", *candidate_budget(fetch, beam, n_labels))


def search_width(
    filters: Iterable[LabelFilter | None], k: int, beam: int, n_labels: int, exact: bool
) -> tuple[int, int, int]:
    """For the service's cost estimate (service/http/cost.py), per document at most: the labels a search fetches,
    the labels scored one by one (an exact include), and the beam."""
    fetch, scored, widest = k, 0, beam
    for f in {id(f): f for f in filters}.values():
        how, kk, bb = plan(f, k, beam, n_labels, exact)
        if how == "exact":
            scored = max(scored, int(f.include.size))
        fetch, widest = max(fetch, kk), max(widest, bb)
    return fetch, scored, widest


def predict_filtered(
    filters: Sequence[LabelFilter | None],
    k: int,
    beam: int,
    n_labels: int,
    search: Callable[[list[int], int, int], Predictions],
    exact: Callable[[list[int], list[np.ndarray]], Predictions] | None,
) -> Predictions:
    """Top-k per document among the labels its filter allows (the module docstring's rules).

    `search(docs, k, beam)`: those documents' plain predictions; `exact(docs, labels)`: each document's given
    labels scored and ordered best first (None: the family cannot). Documents that need the same search are
    predicted together."""
    n = len(filters)
    out_l = np.full((n, k), -1, np.int64)
    out_s = np.full((n, k), -np.inf, np.float32)
    groups: dict[tuple[str, int, int], list[int]] = {}
    for d, f in enumerate(filters):
        groups.setdefault(plan(f, k, beam, n_labels, exact is not None), []).append(d)
    for (how, kk, bb), docs in groups.items():
        if how == "exact":
            preds = exact(docs, [filters[d].labels() for d in docs])
        else:
            preds = search(docs, kk, bb)
        for row, d in enumerate(docs):
            labels, scores = preds.labels[row], preds.scores[row]
            if filters[d] is not None and how != "exact":
                keep = filters[d].allowed(labels)
                labels, scores = labels[keep], scores[keep]
            m = min(k, int((labels >= 0).sum()))
            out_l[d, :m], out_s[d, :m] = labels[:m], scores[:m]
    return Predictions(out_l, out_s)
