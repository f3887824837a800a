"""Tagging texts as `xtag predict` does, with the service's per-request options: the one place that turns a corpus
into output rows, so the local command and the Ray actors (cluster/batch_scoring.py) write the same rows."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
from xtag.models.bundle.loader import Bundle
from xtag.models.errors import XtagError
from xtag.models.inference.label_filter import self_filters
from xtag.models.label_texts import LabelTexts, shown_fields
from xtag.models.tagging.batches import predict_corpus

Rows = list[list[tuple[int, str, float]]]
DEFAULT_K = 10  # labels per text when none is asked for (the service's `k`, `xtag predict --k`)


def labels_per_text(k: int | None, n_labels: int, max_k: int) -> int:
    """The k a request gets, one rule for the service and `xtag predict`: none asked for is DEFAULT_K cut to the
    label count; one asked for above the label count or `max_k` (XTAG_MAX_K) is refused, saying why, never cut."""
    if k is None:
        return min(DEFAULT_K, n_labels)
    k_max = min(n_labels, max_k)
    if k > k_max:
        raise XtagError(f"k: {k} is above the maximum of {k_max} (the model has {n_labels} labels; XTAG_MAX_K={max_k})")
    return k


@dataclass(frozen=True)
class TagOptions:
    """`xtag predict`'s per-text options; they mean what the service's per-request options mean (service/schemas.py)."""

    k: int = DEFAULT_K
    beam_size: int | None = None
    reweight: str | None = None
    alpha: float | None = None
    beta: float | None = None
    threshold: float | None = None
    explain: bool = False
    label_text: bool = False  # each label's name and description from the bundle's label file (the service's)
    exclude_self: bool = False  # a document whose id is a label's name never gets that label (`--exclude-self`)


class Tagger:
    """A bundle with its options checked once (a bad combination is refused before a whole corpus is predicted)."""

    def __init__(self, bundle: Bundle, options: TagOptions):
        self.bundle, self.options = bundle, options
        self.gains = reweight_gains(bundle.predictor, options.reweight, options.alpha, options.beta)
        self.explainer = _explainer(bundle.predictor) if options.explain else None

    def tag(
        self, texts: list[str], progress: bool = False, ids: list | None = None
    ) -> tuple[Rows, list[list[dict | None]]]:
        """(label id, name, score) per text, best first, above the threshold; and each label's explanation.
        `ids`: the documents' ids, which `exclude_self` needs."""
        o = self.options
        if o.exclude_self and ids is None:
            raise XtagError("--exclude-self needs the documents' ids: tag a corpus (--corpus)")
        filters = self_filters(ids, self.bundle.predictor.vocab) if o.exclude_self else None
        preds = predict_corpus(self.bundle, texts, o.k, o.beam_size, progress, gains=self.gains, filters=filters)
        rows = above(self.bundle.predictor.named(preds), o.threshold)
        return rows, explanations(self.explainer, texts, rows)

    def json_rows(self, ids: list, texts: list[str], progress: bool = False) -> list[dict]:
        """The JSON-lines rows of `texts` (json_rows below)."""
        rows, explained = self.tag(texts, progress, ids)
        label_texts = self.bundle.predictor.label_texts
        return json_rows(ids, rows, self.gains, explained, label_texts, self.options.label_text)


def json_rows(
    ids: list,
    rows: Rows,
    gains,
    explanations: list[list[dict | None]],
    texts: LabelTexts | None = None,
    label_text: bool = False,
) -> list[dict]:
    """One `{"id", "labels": [{"name"(, "label", "description"), "score"(, "gain")(, "explanation")}]}` per
    document; with --label-text each label also carries its name and description from `texts` (the bundle's label
    file), with --reweight the gain it was ranked by, with --explain its explanation."""
    return [
        {
            "id": doc_id,
            "labels": [
                {
                    "name": n,
                    **(shown_fields(texts, n) if label_text else {}),
                    "score": round(s, 6),
                    **({} if gains is None else {"gain": round(float(gains[j] * s), 6)}),
                    **({} if e is None else {"explanation": e}),
                }
                for (j, n, s), e in zip(row, explained)
            ],
        }
        for doc_id, row, explained in zip(ids, rows, explanations)
    ]


def to_jsonl(row: dict) -> str:
    """One row as the line `xtag predict` writes (UTF-8 kept as is), local and distributed alike."""
    return json.dumps(row, ensure_ascii=False) + "\n"


def _explainer(predictor):
    """The bundle's explainer; a bundle with nothing to explain with is a one-line error (ExplainUnavailable)."""
    from xtag.models.explain.select import explainer_for

    return explainer_for(predictor)


def explanations(explainer, texts: list[str], rows: Rows) -> list[list[dict | None]]:
    """Each shown label's explanation (models/explain/linear.py) with --explain, else None for every label."""
    if explainer is None:
        return [[None] * len(row) for row in rows]
    return explainer.explain(texts, [[j for j, _, _ in row] for row in rows])


def reweight_gains(predictor, scheme: str | None, alpha: float | None, beta: float | None) -> np.ndarray | None:
    """The gains a_j of a reweighting request, as the service derives them (None: plain scores, also at alpha 0)."""
    from xtag.models.inference.reweighting import SCHEMES, gains_for, label_weights

    if scheme is None:
        if alpha is not None or beta is not None:
            raise XtagError("--alpha and --beta need --reweight psp | power | macro-recall")
        return None
    if alpha is None:
        raise XtagError("--reweight needs --alpha (0 = plain scores, 1 = pure scheme)")
    if scheme not in SCHEMES:
        raise XtagError(f"unknown reweighting scheme {scheme!r}; use one of {', '.join(SCHEMES)}")
    if alpha == 0:  # as the service: alpha 0 is the plain prediction, nothing widened
        return None
    return gains_for(label_weights(predictor.vocab.frequency_array, predictor.vocab.n_train_docs, scheme, beta), alpha)


def above(rows: Rows, threshold: float | None) -> Rows:
    """The service's `threshold`: labels whose score is below it are dropped (none without one)."""
    return rows if threshold is None else [[r for r in row if r[2] >= threshold] for row in rows]
