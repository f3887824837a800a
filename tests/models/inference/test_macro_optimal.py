import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from xtag.models.errors import XtagError
from xtag.models.inference import macro_optimal
from xtag.models.inference.macro_optimal import OptimizeConfig, optimize, optimize_predictions, predict_optimized
from xtag.models.metrics import evaluate


def synthetic(n: int = 1500, m: int = 60, K: int = 15, seed: int = 0):
    """Calibrated η with a long tail: head labels dominate every top-k, tail labels are often fairly likely.

    Returns each document's K most probable labels with their η, the truth sampled from η, and m.
    """
    rng = np.random.default_rng(seed)
    prior = 3 / (np.arange(m) + 1) ** 1.1 / np.sum(1 / (np.arange(m) + 1) ** 1.1)
    eta = 1 / (1 + np.exp(-(np.log(prior)[None, :] + 1.5 * rng.standard_normal((n, m)))))
    Y = sp.csr_matrix((rng.random((n, m)) < eta).astype(np.float32))
    order = np.argsort(-eta, axis=1)[:, :K]
    return order, np.take_along_axis(eta, order, 1), Y, m


def semi_empirical(labels, ids, eta, m, k, metric="macro-f1", alpha=1.0):
    """Ψ̃ of eq. 4.16 recomputed from scratch with dictionaries (independent of the module's arrays)."""
    p, t, q = {}, {}, {}
    for row_ids, row_eta, row_lab in zip(ids, eta, labels):
        e = {int(j): float(v) for j, v in zip(row_ids, row_eta) if j >= 0}
        for j, v in e.items():
            p[j] = p.get(j, 0.0) + v
        for j in row_lab[row_lab >= 0]:
            t[int(j)] = t.get(int(j), 0.0) + e[int(j)]
            q[int(j)] = q.get(int(j), 0.0) + 1
    n = len(ids)
    if metric == "macro-f1":
        macro = sum(2 * t.get(j, 0.0) / (p[j] + q.get(j, 0)) for j in p if p[j] + q.get(j, 0) > 0)
    else:
        macro = sum(t.get(j, 0.0) / p[j] for j in p if p[j] > 0)
    return (1 - alpha) * sum(t.values()) / (n * k) + alpha * macro / m, t, q


@pytest.fixture(scope="module")
def data():
    return synthetic()


@pytest.mark.parametrize("method", ["bca", "fw"])
def test_macro_f1_beats_plain_top_k_on_sampled_truth(data, method):
    ids, eta, Y, m = data
    top = evaluate(ids[:, :3], Y, (3,))
    res = optimize(ids, eta, 3, m, OptimizeConfig(metric="macro-f1", method=method))
    opt = evaluate(res.labels, Y, (3,))
    assert opt["macro-F1@3"] > top["macro-F1@3"] + 4
    assert res.objective > res.objective_start


def test_bca_never_lowers_its_objective_and_matches_a_recomputation(data):
    ids, eta, _, m = data
    res = optimize(ids, eta, 3, m, OptimizeConfig(metric="macro-f1", alpha=0.5, tol=0.0, max_sweeps=4))
    assert np.all(np.diff(res.history) >= -1e-12) and res.steps > 2 * len(ids)
    value, t, q = semi_empirical(res.labels, ids, eta, m, 3, alpha=0.5)
    assert res.objective == pytest.approx(value, rel=1e-9)
    # the online confusion counts (updated step by step over 4 sweeps) equal counts recomputed from the output
    tp = dict(zip(res.label_ids.tolist(), res.tp))
    pred = dict(zip(res.label_ids.tolist(), res.predicted))
    assert all(tp[j] == pytest.approx(t.get(j, 0.0), abs=1e-9) for j in tp)
    assert all(pred[j] == q.get(j, 0) for j in pred)


def test_bca_result_is_blockwise_optimal():
    """No single document can improve Ψ̃ by switching to any other k-subset of its candidates (a BCA fixed point)."""
    ids, eta, _, m = synthetic(n=40, m=12, K=5, seed=3)
    k = 2
    res = optimize(ids, eta, k, m, OptimizeConfig(metric="macro-f1", alpha=0.7, tol=0.0, max_sweeps=50))
    assert res.stopped == "converged"
    base, _, _ = semi_empirical(res.labels, ids, eta, m, k, alpha=0.7)
    for i in range(len(ids)):
        for subset in itertools.combinations(ids[i], k):
            alt = res.labels.copy()
            alt[i] = subset
            assert semi_empirical(alt, ids, eta, m, k, alpha=0.7)[0] <= base + 1e-12


@pytest.mark.parametrize("method", ["bca", "fw"])
def test_fw_and_bca_give_a_valid_top_k_from_the_shortlist(data, method):
    ids, eta, Y, m = data
    res = optimize(ids, eta, 5, m, OptimizeConfig(metric="macro-recall", method=method))
    assert res.labels.shape == (len(ids), 5)
    for row, cand in zip(res.labels, ids):
        assert len(set(row.tolist())) == 5 and set(row.tolist()) <= set(cand.tolist())
    assert np.all(np.diff(res.scores, axis=1) <= 0)  # best η first
    assert evaluate(res.labels, Y, (5,))["macro-R@5"] > evaluate(ids[:, :5], Y, (5,))["macro-R@5"] + 4


def test_macro_recall_is_the_linear_case_of_eq_4_18(data):
    """Macro-recall is linear in t: the optimum is top_k(η_j / p̃_j) per document, in one pass."""
    ids, eta, _, m = data
    res = optimize(ids, eta, 3, m, OptimizeConfig(metric="macro-recall", method="bca"))
    p = np.bincount(ids.ravel(), weights=eta.ravel(), minlength=m)
    expect = np.take_along_axis(ids, np.argsort(-eta / p[ids], axis=1)[:, :3], 1)
    assert all(set(a) == set(b) for a, b in zip(res.labels.tolist(), expect.tolist()))


@pytest.mark.parametrize("method", ["bca", "fw"])
def test_alpha_zero_is_plain_top_k(data, method):
    ids, eta, _, m = data
    labels = optimize_predictions(ids, eta, 3, m, alpha=0.0, method=method)
    assert all(set(a) == set(b) for a, b in zip(labels.tolist(), ids[:, :3].tolist()))


def test_short_shortlists_are_padded_and_time_cap_returns_a_valid_answer(data):
    ids, eta, _, m = data
    ids, eta = ids.copy(), eta.copy()
    ids[0, 2:], eta[0, 2:] = -1, -np.inf  # a document with only 2 candidates
    res = optimize(ids, eta, 3, m, OptimizeConfig(max_seconds=1e-9))
    assert res.stopped == "time"
    assert res.labels[0, 2] == -1 and set(res.labels[0, :2]) == set(ids[0, :2])
    assert np.all(res.labels[1:] >= 0)


def test_bad_inputs_are_clear_errors(data):
    ids, eta, _, m = data
    with pytest.raises(XtagError, match=r"\[0, 1\]"):
        optimize_predictions(ids, eta * 3, 3, m)
    dup = ids.copy()
    dup[0, 1] = dup[0, 0]
    with pytest.raises(XtagError, match="repeats"):
        optimize_predictions(dup, eta, 3, m)
    with pytest.raises(XtagError, match="label count"):
        optimize_predictions(ids, eta, 3, m - 10)


def test_predict_optimized_on_a_bundle_enforces_the_serving_cap(tiny_bundle, monkeypatch):
    from xtag.models.bundle.loader import load_bundle

    predictor = load_bundle(tiny_bundle).predictor
    texts = ["email smtp inbox", "python pip module", "obscure rare niche oddity", "audio mixer music"] * 10
    cfg = macro_optimal.serving_config("macro-f1", 0.5)
    preds = predict_optimized(predictor, texts, 3, 10, predictor.n_labels, cfg)
    assert preds.labels.shape == (40, 3) and np.all(preds.labels >= 0)
    assert cfg.max_seconds == macro_optimal.SERVING_MAX_SECONDS
    monkeypatch.setattr(macro_optimal, "SERVING_MAX_DOCS", 39)
    with pytest.raises(XtagError, match="at most 39"):
        predict_optimized(predictor, texts, 3, 10, predictor.n_labels, cfg)
