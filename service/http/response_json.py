"""Prediction arrays → the response's label lists as JSON text, without an object per label.

A 256-document batch at k=10 returned 2,560 {id, name, score} dicts built from Python ints and floats,
then serialised. Here each label's `{"id":…,"name":…,"score":` prefix is rendered once per model and
reused, the scores are formatted by orjson in one call on the whole array (as float64, so the digits are
those json.dumps gives for the same float32 value), and each document's list becomes one orjson.Fragment.
The JSON is the documented LabelScore list, byte for byte what orjson gives for the dicts.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import orjson
from xtag.models.inference.types import Predictions
from xtag.models.label_texts import LabelTexts, shown_fields


class LabelPrefixes:
    """`{"id":j,"name":"…","score":` per label id, rendered on first use (a model may have millions of labels).
    With `texts` (a `label_text` request's), `{"id":j,"name":"…","label":"…","description":…,"score":`: a request
    that asks for the label texts uses its own cache, and one that does not reads the plain prefixes as before."""

    def __init__(self, names: list[str], texts: LabelTexts | None = None, with_text: bool = False):
        self.names, self.texts, self.with_text = names, texts, with_text
        self._cache: dict[int, bytes] = {}

    def __call__(self, j: int) -> bytes:
        prefix = self._cache.get(j)
        if prefix is None:
            name = self.names[j]
            text = orjson.dumps(shown_fields(self.texts, name))[1:-1] + b"," if self.with_text else b""
            prefix = self._cache[j] = b'{"id":%d,"name":%s,%s"score":' % (j, orjson.dumps(name), text)
        return prefix


def kept_mask(preds: Predictions, threshold: float | None) -> np.ndarray:
    """Which labels a response lists: padding (-1) and scores under `threshold` dropped."""
    cut = -1.0 if threshold is None else float(threshold)
    return (preds.labels >= 0) & (preds.scores >= cut)


def _number_rows(values: np.ndarray, n: int) -> list[list[bytes]]:
    """Each row of a 2-d array as its numbers' JSON texts, formatted by orjson in one call (as float64)."""
    text = orjson.dumps(np.asarray(values, dtype=np.float64), option=orjson.OPT_SERIALIZE_NUMPY)
    return [row.split(b",") for row in text[2:-2].split(b"],[")] if values.size else [[] for _ in range(n)]


def label_lists(
    prefixes: LabelPrefixes, preds: Predictions, threshold: float | None, gains: np.ndarray | None = None
) -> list[orjson.Fragment]:
    """Each document's labels as a JSON array, best first; padding (-1) and scores under `threshold` dropped.
    With `gains` (a reweighted request's, models/reweighting.gains_of) each label also carries its `gain`."""
    keep = kept_mask(preds, threshold).tolist()
    score_rows = _number_rows(preds.scores, len(keep))
    out = []
    if gains is None:
        for ids, kept, scores in zip(preds.labels.tolist(), keep, score_rows):
            items = [prefixes(j) + s for j, k, s in zip(ids, kept, scores) if k]
            out.append(orjson.Fragment(b"[" + b"},".join(items) + b"}]" if items else b"[]"))
        return out
    gain_rows = _number_rows(np.where(np.isfinite(gains), gains, 0.0), len(keep))  # padding's -inf is dropped
    for ids, kept, scores, gs in zip(preds.labels.tolist(), keep, score_rows, gain_rows):
        items = [prefixes(j) + s + b',"gain":' + g for j, k, s, g in zip(ids, kept, scores, gs) if k]
        out.append(orjson.Fragment(b"[" + b"},".join(items) + b"}]" if items else b"[]"))
    return out


def explained_lists(
    names: list[str],
    preds: Predictions,
    threshold: float | None,
    explain: Callable[[int, list[int]], list[dict]],
    gains: np.ndarray | None = None,
    texts: LabelTexts | None = None,
    with_text: bool = False,
) -> list[orjson.Fragment]:
    """`label_lists` with an `explanation` per label, from `explain(document index, its label ids)`: the same labels
    and the same score digits (float64 of the float32 score, as there). Plain dicts here: explaining costs far more
    than serialising them. One document at a time, each label its own `orjson.dumps`, so that the worker thread
    never holds the GIL long in one call (a document of 595 explained labels was one 20-50 ms dumps) and a batch's
    explanations never pile up into a full garbage collection (a 10 x 595 batch's ran 0.3 s on the GIL, a /health
    stall that long: issue 47, defect 7). `with_text`: each label also has its `label` and `description` from
    `texts`, as LabelPrefixes renders them."""
    keep = kept_mask(preds, threshold)
    labels = [row[k].tolist() for row, k in zip(preds.labels, keep)]
    scores = [row[k].tolist() for row, k in zip(np.asarray(preds.scores, dtype=np.float64), keep)]
    gain_lists = [None] * len(labels) if gains is None else [row[k].tolist() for row, k in zip(gains, keep)]
    out = []
    for d, (ids, values, gs) in enumerate(zip(labels, scores, gain_lists)):
        items = [
            orjson.dumps(
                {
                    "id": j,
                    "name": names[j],
                    **(shown_fields(texts, names[j]) if with_text else {}),
                    "score": s,
                    **({} if gs is None else {"gain": gs[i]}),
                    "explanation": e,
                }
            )
            for i, (j, s, e) in enumerate(zip(ids, values, explain(d, ids)))
        ]
        out.append(orjson.Fragment(b"[" + b",".join(items) + b"]"))
    return out
