"""Φ_cat at inference: the dense-tail scoring path gives the sparse paths' scores on every branch."""

import numpy as np
import pytest
import scipy.sparse as sp

import models.inference as inference
from models.concat_features import concat_features
from models.inference import RankerLevel, TreeIndex, beam_search, score_candidates
from models.label_tree import ClusterChain


def phi_cat_level(rng, nodes, sparse_dim=300, dense_dim=16):
    W = sp.hstack([sp.random(nodes, sparse_dim, density=0.05, random_state=rng, dtype=np.float32),
                   sp.random(nodes, dense_dim, density=0.7, random_state=rng, dtype=np.float32)], format="csr")
    return RankerLevel(W, rng.normal(size=nodes).astype(np.float32))


def phi_cat_docs(rng, n, sparse_dim=300, dense_dim=16):
    X = sp.random(n, sparse_dim, density=0.03, random_state=rng, format="csr", dtype=np.float32)
    return concat_features(X, rng.normal(size=(n, dense_dim)).astype(np.float32))


@pytest.mark.parametrize("n", [1, 5, 40])
@pytest.mark.parametrize("full_product_max", [8192, 10])
def test_dense_tail_scores_equal_sparse_scores(n, full_product_max, monkeypatch):
    monkeypatch.setattr(inference, "FULL_PRODUCT_MAX_NODES", full_product_max)
    rng = np.random.default_rng(n)
    level = phi_cat_level(rng, 30)
    X = phi_cat_docs(rng, n)
    cand = rng.integers(-1, 30, size=(n, 12))
    expected = score_candidates(X, level, cand)
    level.set_dense_tail(300)
    got = score_candidates(X, level, cand)
    valid = cand >= 0
    assert np.allclose(got[valid], expected[valid], atol=1e-5)


def test_model_with_dense_features_predicts_like_the_plain_sparse_model():
    from models.xlinear import RankerConfig, XLinearModel

    rng = np.random.default_rng(7)
    chain = ClusterChain(ptrs=[np.array([0, 3]), np.array([0, 3, 6, 9])], leaf_labels=rng.permutation(9))
    levels = [phi_cat_level(rng, 3), phi_cat_level(rng, 9)]
    X = phi_cat_docs(rng, 25)
    plain = beam_search(X, levels, TreeIndex(chain), 2, 4)
    model = XLinearModel(chain, [RankerLevel(lv.W, lv.bias) for lv in levels],
                         RankerConfig(n_features=316, dense_features=16))
    assert all(level.dense is not None for level in model.levels)
    for rows in (slice(0, 1), slice(0, 25)):
        got = model.predict(X[rows], k=4, beam_size=2)
        assert np.array_equal(got.labels, plain.labels[rows])
        assert np.allclose(got.scores, plain.scores[rows], atol=1e-5)
