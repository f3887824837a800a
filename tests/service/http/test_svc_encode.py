"""The label lists built from arrays (service/http/response_json.py) are the JSON the documented dicts give."""

from __future__ import annotations

import json

import numpy as np
import orjson
from xtag.models.inference.types import Predictions
from xtag.service.http.response_json import LabelPrefixes, label_lists

NAMES = ["lang::python", 'a "quoted" name', "ünïcode\\slash", "x"]


def dicts(preds: Predictions, cut: float) -> list[list[dict]]:
    return [
        [{"id": j, "name": NAMES[j], "score": s} for j, s in zip(row_l, row_s) if j >= 0 and s >= cut]
        for row_l, row_s in zip(preds.labels.tolist(), preds.scores.tolist())
    ]


def test_label_lists_equal_the_dicts_json():
    scores = np.array([[0.9, 0.5, 1e-7, 0.0], [1.0, 0.25, 0.1, 0.0], [0.3, 0.2, 0.0, 0.0]], np.float32)
    scores += np.float32(1 / 3)  # digits that float32 → float64 shows in full
    labels = np.array([[0, 1, 2, 3], [3, 2, -1, -1], [-1, -1, -1, -1]])
    preds = Predictions(labels=labels, scores=scores)
    prefixes = LabelPrefixes(NAMES)
    for threshold, cut in ((None, -1.0), (0.5, 0.5), (1.0, 1.0)):
        got = orjson.dumps(label_lists(prefixes, preds, threshold))
        assert got == orjson.dumps(dicts(preds, cut))
        assert json.loads(got) == dicts(preds, cut)  # parses back to the same ids, names and float values
    assert orjson.dumps(label_lists(prefixes, Predictions(labels=labels[:0], scores=scores[:0]), None)) == b"[]"
