"""The compiled ranker solver (training/xlinear/solver.py) against liblinear, and train_level's plumbing."""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.linear_model import LogisticRegression
from sklearn.svm import LinearSVC
from xtag.training.xlinear.config import XLinearConfig
from xtag.training.xlinear.train import _fit_node, train_level

TIGHT = {"tol": 1e-7, "max_iter": 20000, "threshold": 0.0}


def problem(n=240, d=40, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.15, format="csr", random_state=seed, dtype=dtype)
    y = X @ rng.normal(size=d) + 0.2 * rng.normal(size=n) > 0.05
    return X, y, rng.uniform(0.2, 3.0, size=n)


def objective(X, y, w, b, loss, C, weight):
    m = np.where(y, 1.0, -1.0) * (X @ w + b)
    per = np.maximum(0.0, 1.0 - m) ** 2 if loss == "squared-hinge" else np.logaddexp(0.0, -m)
    return 0.5 * (w @ w + b * b) + np.sum(C * (1.0 if weight is None else weight) * per)


def dense(X, fitted):
    w = np.zeros(X.shape[1])
    w[fitted[0]] = fitted[1]
    return w, fitted[2]


@pytest.mark.parametrize("loss", ["squared-hinge", "logistic"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_same_optimum_as_liblinear(loss, weighted, dtype):
    X, y, weight = problem(dtype=dtype)
    weight = weight if weighted else None
    C = 0.7
    ours = dense(X, _fit_node(X, y, XLinearConfig(loss=loss, C=C, **TIGHT), weight))
    if loss == "squared-hinge":
        ref = LinearSVC(C=C, loss="squared_hinge", dual=True, tol=1e-10, max_iter=100000)
    else:
        ref = LogisticRegression(C=C, solver="liblinear", tol=1e-10, max_iter=100000)
    ref.fit(X.astype(np.float64), y, sample_weight=weight)
    X64 = X.astype(np.float64)
    f_ours = objective(X64, y, *ours, loss, C, weight)
    f_ref = objective(X64, y, ref.coef_.ravel(), ref.intercept_[0], loss, C, weight)
    assert f_ours == pytest.approx(f_ref, rel=1e-6)
    np.testing.assert_allclose(ours[0], ref.coef_.ravel(), atol=1e-4)
    assert ours[1] == pytest.approx(ref.intercept_[0], abs=1e-4)


def test_default_tolerance_is_near_the_optimum():
    X, y, _ = problem(n=400, seed=3)
    loose = dense(X, _fit_node(X, y, XLinearConfig(threshold=0.0)))
    tight = dense(X, _fit_node(X, y, XLinearConfig(**TIGHT)))
    f_loose, f_tight = (objective(X, y, *f, "squared-hinge", 1.0, None) for f in (loose, tight))
    assert f_tight <= f_loose <= 1.02 * f_tight


@pytest.mark.parametrize("positive", [True, False])
def test_one_class_node_is_a_constant_ranker(positive):
    X, _, _ = problem(n=30)
    idx, val, bias = _fit_node(X, np.full(30, positive), XLinearConfig())
    assert len(idx) == len(val) == 0 and bias == (1.0 if positive else -1.0)


def test_pruning_keeps_large_weights_only():
    X, y, _ = problem(n=300, d=60, seed=1)
    full = _fit_node(X, y, XLinearConfig(threshold=0.0))
    pruned = _fit_node(X, y, XLinearConfig(threshold=0.3))
    assert 0 < len(pruned[0]) < len(full[0]) and np.abs(pruned[1]).min() >= 0.3
    keep = np.abs(full[1]) >= 0.3
    np.testing.assert_array_equal(pruned[0], full[0][keep])
    np.testing.assert_array_equal(pruned[1], full[1][keep])
    assert pruned[2] == full[2]


def test_zero_weight_documents_are_left_out():
    X, y, weight = problem(seed=4)
    weight[::3] = 0.0
    keep = weight > 0
    for loss in ("squared-hinge", "logistic"):
        config = XLinearConfig(loss=loss, **TIGHT)
        with_zeros = dense(X, _fit_node(X, y, config, weight))
        without = dense(X, _fit_node(X[keep], y[keep], config, weight[keep]))
        np.testing.assert_allclose(with_zeros[0], without[0], atol=1e-4)


def level_problem(seed=0):
    """Two parents, the second seeing some documents only, over 3 and 21 children."""
    rng = np.random.default_rng(seed)
    n, d, nodes = 400, 80, 24
    X = sp.random(n, d, density=0.08, format="csr", random_state=seed, dtype=np.float32)
    Y = (rng.random((n, nodes)) < 0.2) & (rng.random((n, 1)) < 0.9)
    Y[:, 6] = False  # a node without positives
    mask = np.zeros((n, 2), bool)
    mask[:, 0] = True
    mask[rng.random(n) < 0.6, 1] = True
    ptr = np.array([0, 3, nodes])
    return X, sp.csr_matrix(Y, dtype=np.float32), sp.csc_matrix(mask.astype(np.float32)), ptr


@pytest.mark.parametrize("loss", ["squared-hinge", "logistic"])
def test_level_is_independent_of_thread_count(loss):
    X, Y, mask, ptr = level_problem()
    levels = [train_level(X, Y, mask, ptr, XLinearConfig(loss=loss, n_jobs=jobs), progress=False) for jobs in (1, 2, 5)]
    for other in levels[1:]:
        assert (other.W != levels[0].W).nnz == 0
        np.testing.assert_array_equal(other.bias, levels[0].bias)
    assert levels[0].bias[6] == -1.0 and levels[0].W[6].nnz == 0
    assert levels[0].W[7:].getnnz(axis=1).min() > 0
    seeded = XLinearConfig(loss=loss, n_jobs=2)
    seeded.tree.seed = 7
    assert (train_level(X, Y, mask, ptr, seeded, progress=False).W != levels[0].W).nnz > 0


@pytest.mark.parametrize("loss", ["squared-hinge", "logistic"])
def test_level_nodes_match_single_fits_on_the_parent_rows(loss):
    """The shared slice (rows picked, columns renumbered) and the relevance weights reach each node intact."""
    X, Y, mask, ptr = level_problem(seed=2)
    R = Y.multiply(sp.csr_matrix(np.random.default_rng(0).uniform(0.5, 2.0, Y.shape))).tocsr()
    config = XLinearConfig(loss=loss, n_jobs=2, **TIGHT)
    level = train_level(X, Y, mask, ptr, config, progress=False, relevance=R, neg_weight=0.3)
    rows = np.flatnonzero(mask[:, 1].toarray().ravel())
    for node in (3, 6, 7, 14, 23):
        y = Y[rows, node].toarray().ravel() > 0
        weight = np.where(y, R[rows, node].toarray().ravel(), 0.3)
        idx, val, bias = _fit_node(X[rows], y, config, weight)
        np.testing.assert_allclose(level.W[node].toarray().ravel()[idx], val, atol=1e-4)
        assert level.W[node].nnz == len(idx) and level.bias[node] == pytest.approx(bias, abs=1e-4)
