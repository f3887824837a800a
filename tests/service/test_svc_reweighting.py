"""xtag.models.inference.reweighting: gains from label frequencies, re-ranking of beam candidates, candidate widening."""

from __future__ import annotations

import numpy as np
import pytest
from xtag.models.errors import XtagError
from xtag.models.inference.reweighting import (
    BEAM_FACTOR,
    CANDIDATE_FACTOR,
    MIN_CANDIDATES,
    candidate_budget,
    gains_for,
    label_weights,
    predict_reweighted,
    rerank,
)
from xtag.models.inference.types import Predictions
from xtag.models.metrics import jain_propensities

FREQ = np.array([1000, 100, 10, 1, 50], dtype=np.float64)
N = 2000


@pytest.mark.parametrize("scheme", ["psp", "power", "macro-recall"])
def test_weights_are_normalised_to_an_average_true_label_weight_of_one(scheme):
    w = label_weights(FREQ, N, scheme)
    assert np.isclose((FREQ * w).sum(), FREQ.sum())
    assert np.all(np.diff(w[[0, 1, 2, 3]]) > 0), "rarer labels must weigh more"


def test_scheme_shapes_match_their_definitions():
    psp = label_weights(FREQ, N, "psp")
    inv_p = 1 / jain_propensities(FREQ, N)
    assert np.allclose(psp / psp[0], inv_p / inv_p[0])
    mr = label_weights(FREQ, N, "macro-recall")
    assert np.allclose(mr / mr[0], FREQ[0] / FREQ)
    p2 = label_weights(FREQ, N, "power", beta=2.0)
    assert np.allclose(p2 / p2[0], (FREQ[0] / FREQ) ** 2)
    assert np.allclose(label_weights(FREQ, N, "power", beta=0.0), 1.0)  # β = 0: every label alike
    default = label_weights(FREQ, N, "power")
    assert np.allclose(default / default[0], np.sqrt(FREQ[0] / FREQ))


def test_alpha_interpolates_between_plain_and_scheme():
    w = label_weights(FREQ, N, "macro-recall")
    assert np.allclose(gains_for(w, 0.0), 1.0)
    assert np.allclose(gains_for(w, 1.0), w)
    assert np.allclose(gains_for(w, 0.25), 0.75 + 0.25 * w)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"scheme": "nope"}, "unknown reweighting scheme"),
        ({"scheme": "psp", "beta": 1.0}, "only applies to the 'power'"),
        ({"scheme": "power", "beta": -1.0}, "beta must be"),
        ({"scheme": "power", "beta": float("nan")}, "beta must be"),
    ],
)
def test_invalid_parameters_raise_xtag_error(kwargs, message):
    with pytest.raises(XtagError, match=message):
        label_weights(FREQ, N, **kwargs)


@pytest.mark.parametrize("alpha", [-0.1, 1.5, float("nan")])
def test_alpha_outside_unit_interval_is_rejected(alpha):
    with pytest.raises(XtagError, match="alpha"):
        gains_for(np.ones(3), alpha)


def test_rerank_is_topk_of_gain_over_candidates():
    rng = np.random.default_rng(0)
    m, n, kc, k = 40, 25, 12, 5
    a = rng.uniform(0.1, 10, m)
    labels = np.array([rng.choice(m, kc, replace=False) for _ in range(n)])
    scores = rng.uniform(0, 1, (n, kc)).astype(np.float32)
    out, gains = rerank(Predictions(labels, scores), a, k)
    for i in range(n):
        g = a[labels[i]] * scores[i]
        best = labels[i][np.argsort(-g, kind="stable")[:k]]
        assert out.labels[i].tolist() == best.tolist()
        assert np.all(np.diff(gains[i]) <= 0)
        # the reported score is the model's score of that label, not the gain
        pos = {int(j): s for j, s in zip(labels[i], scores[i])}
        assert out.scores[i].tolist() == pytest.approx([pos[int(j)] for j in out.labels[i]])


def test_rerank_promotes_a_tail_label_and_keeps_padding_last():
    preds = Predictions(np.array([[0, 3, -1]]), np.array([[0.9, 0.3, -np.inf]], dtype=np.float32))
    w = label_weights(FREQ, N, "macro-recall")
    plain, _ = rerank(preds, gains_for(w, 0.0), 3)
    assert plain.labels.tolist() == [[0, 3, -1]]
    out, _ = rerank(preds, gains_for(w, 1.0), 3)
    assert out.labels.tolist() == [[3, 0, -1]]
    wide, _ = rerank(preds, gains_for(w, 1.0), 5)  # more slots than candidates: padded like beam search
    assert wide.labels.tolist() == [[3, 0, -1, -1, -1]]
    assert np.isneginf(wide.scores[0, 2:]).all()


def test_candidate_budget_widens_k_and_beam_within_the_label_count():
    assert candidate_budget(5, 10, 10_000) == (max(CANDIDATE_FACTOR * 5, MIN_CANDIDATES), 10 * BEAM_FACTOR)
    assert candidate_budget(100, 10, 10_000) == (CANDIDATE_FACTOR * 100, 10 * BEAM_FACTOR)
    assert candidate_budget(5, 10, 30)[0] == 30


class Recorder:
    """A predictor that returns fixed candidates and records what it was asked for."""

    def __init__(self, labels, scores):
        self.preds, self.calls = Predictions(np.array(labels), np.array(scores, dtype=np.float32)), []

    def predict(self, texts, k=10, beam_size=None, rerank=True):
        self.calls.append((len(texts), k, beam_size))
        return Predictions(self.preds.labels[:, :k], self.preds.scores[:, :k])


def test_predict_reweighted_widens_only_when_reweighting():
    rec = Recorder([[0, 1, 2, 3, 4]], [[0.9, 0.8, 0.5, 0.4, 0.1]])
    plain = predict_reweighted(rec, ["t"], 2, None, beam_size=7, n_labels=5)
    assert rec.calls[-1] == (1, 2, 7) and plain.labels.tolist() == [[0, 1]]
    a = gains_for(label_weights(FREQ, N, "macro-recall"), 1.0)
    out = predict_reweighted(rec, ["t"], 2, a, beam_size=7, n_labels=5)
    assert rec.calls[-1] == (1, 5, 7 * BEAM_FACTOR)
    assert out.labels.tolist() == [[3, 2]]  # 0.4/1 and 0.5/10 beat 0.9/1000 and 0.8/100
