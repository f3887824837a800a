"""Φ_cat at inference: the dense-tail scoring path gives the sparse paths' scores on every branch."""

import numpy as np
import pytest
import scipy.sparse as sp
import xtag.models.inference.beam_search as inference
from xtag.models.inference.beam_search import beam_search, score_candidates
from xtag.models.inference.types import RankerLevel, TreeIndex
from xtag.models.label_tree import ClusterChain
from xtag.models.xr_transformer.concat_features import concat_features


def phi_cat_level(rng, nodes, sparse_dim=300, dense_dim=16):
    W = sp.hstack(
        [
            sp.random(nodes, sparse_dim, density=0.05, random_state=rng, dtype=np.float32),
            sp.random(nodes, dense_dim, density=0.7, random_state=rng, dtype=np.float32),
        ],
        format="csr",
    )
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
    from xtag.models.xlinear.model import RankerConfig, XLinearModel

    rng = np.random.default_rng(7)
    chain = ClusterChain(ptrs=[np.array([0, 3]), np.array([0, 3, 6, 9])], leaf_labels=rng.permutation(9))
    levels = [phi_cat_level(rng, 3), phi_cat_level(rng, 9)]
    X = phi_cat_docs(rng, 25)
    plain = beam_search(X, levels, TreeIndex(chain), 2, 4)
    model = XLinearModel(
        chain, [RankerLevel(lv.W, lv.bias) for lv in levels], RankerConfig(n_features=316, dense_features=16)
    )
    assert all(level.dense is not None for level in model.levels)
    for rows in (slice(0, 1), slice(0, 25)):
        got = model.predict(X[rows], k=4, beam_size=2)
        assert np.array_equal(got.labels, plain.labels[rows])
        assert np.allclose(got.scores, plain.scores[rows], atol=1e-5)


class FixedEncoder:
    """Stands in for the ONNX encoder: a fixed embedding per text."""

    def __init__(self, table: dict[str, np.ndarray]):
        self.table, self.dim = table, len(next(iter(table.values())))

    def encode(self, texts):
        return np.vstack([self.table[t] for t in texts])


@pytest.mark.parametrize("with_tfidf", [True, False])
def test_served_phi_cat_blocks_predict_like_the_training_matrix(with_tfidf):
    """ConcatFeaturizer hands beam search TF-IDF and embedding apart (SplitFeatures); predictions, for one
    document and for batches on both sides of the gather threshold, equal those on `concat_features`'s CSR."""
    from xtag.models.features.tfidf import TfidfConfig, TfidfFeaturizer
    from xtag.models.inference.types import SplitFeatures
    from xtag.models.xlinear.model import RankerConfig, XLinearModel
    from xtag.models.xr_transformer.concat_features import ConcatFeaturizer

    from tests.conftest import make_rows

    rng = np.random.default_rng(3)
    texts = [r["text"] for r in make_rows(40, seed=9)]
    tfidf, _ = TfidfFeaturizer.fit(texts, TfidfConfig(min_df=1))
    dense = 16
    encoder = FixedEncoder({t: rng.normal(size=dense).astype(np.float32) for t in texts})
    featurizer = ConcatFeaturizer(tfidf if with_tfidf else None, encoder)
    d = tfidf.dim if with_tfidf else 0
    chain = ClusterChain(ptrs=[np.array([0, 3]), np.array([0, 3, 6, 9])], leaf_labels=rng.permutation(9))
    levels = [
        phi_cat_level(rng, nodes, d, dense)
        if d
        else RankerLevel(sp.csr_matrix(rng.normal(size=(nodes, dense)).astype(np.float32)), np.zeros(nodes, np.float32))
        for nodes in (3, 9)
    ]
    model = XLinearModel(chain, levels, RankerConfig(n_features=d + dense, dense_features=dense))
    for batch in (texts[:1], texts[:5], texts):
        split = featurizer.transform(batch)
        assert isinstance(split, SplitFeatures)
        X = concat_features(tfidf.transform(batch) if with_tfidf else None, encoder.encode(batch))
        assert abs(split.tocsr() - X).max() < 1e-6
        got, expected = model.predict(split, k=4, beam_size=2), model.predict(X, k=4, beam_size=2)
        assert np.array_equal(got.labels, expected.labels)
        assert np.allclose(got.scores, expected.scores, atol=1e-6)
