import numpy as np
import scipy.sparse as sp
from xtag.models.inference.beam_search import POST_PROCESSORS, beam_search, score_candidates, top_k
from xtag.models.inference.types import RankerLevel, TreeIndex
from xtag.models.label_tree import ClusterChain


def random_model(rng, n_features=30):
    # Root → 3 clusters → 8 labels (sizes 3, 3, 2), labels stored in a shuffled order.
    chain = ClusterChain(ptrs=[np.array([0, 3]), np.array([0, 3, 6, 8])], leaf_labels=rng.permutation(8))
    levels = [
        RankerLevel(
            sp.random(n, n_features, density=0.5, random_state=rng, format="csr", dtype=np.float32),
            rng.normal(size=n).astype(np.float32),
        )
        for n in (3, 8)
    ]
    return chain, levels


def brute_force(X, chain, levels, post):
    s1 = POST_PROCESSORS[post](X @ levels[0].W.T.toarray() + levels[0].bias)
    s2 = POST_PROCESSORS[post](X @ levels[1].W.T.toarray() + levels[1].bias)
    path = s1[:, chain.parents(2)] * s2
    out = np.zeros_like(path)
    out[:, chain.leaf_labels] = path
    return out


def test_exhaustive_beam_equals_brute_force_scoring():
    rng = np.random.default_rng(0)
    chain, levels = random_model(rng)
    X = sp.random(20, 30, density=0.3, random_state=rng, format="csr", dtype=np.float32)
    for post in POST_PROCESSORS:
        pred = beam_search(X, levels, TreeIndex(chain), beam_size=3, k=8, post_processor=post)
        expected = brute_force(X.toarray(), chain, levels, post)
        got = np.zeros_like(expected)
        np.put_along_axis(got, pred.labels, pred.scores, axis=1)
        assert np.allclose(got, expected, atol=1e-5)
        assert (np.diff(pred.scores, axis=1) <= 1e-7).all()  # best first


def test_narrow_beam_only_returns_labels_under_kept_clusters():
    rng = np.random.default_rng(1)
    chain, levels = random_model(rng)
    X = sp.random(10, 30, density=0.3, random_state=rng, format="csr", dtype=np.float32)
    pred = beam_search(X, levels, TreeIndex(chain), beam_size=1, k=5)
    cluster_of_label = chain.ancestors(1)
    for row in pred.labels:
        valid = row[row >= 0]
        assert len(set(cluster_of_label[valid])) == 1
        assert len(valid) <= 3 and (row[len(valid) :] == -1).all()  # padded when fewer than k


def test_single_document_path_equals_batch_path():
    rng = np.random.default_rng(2)
    chain, levels = random_model(rng)
    X = sp.random(40, 30, density=0.3, random_state=rng, format="csr", dtype=np.float32)
    batch = beam_search(X, levels, TreeIndex(chain), beam_size=2, k=4)
    for i in range(X.shape[0]):
        one = beam_search(X[i], levels, TreeIndex(chain), beam_size=2, k=4)
        assert (one.labels[0] == batch.labels[i]).all()
        assert np.allclose(one.scores[0], batch.scores[i])


def test_candidate_path_for_large_levels_matches_full_product(monkeypatch):
    import xtag.models.inference.beam_search as inference

    rng = np.random.default_rng(3)
    level = RankerLevel(
        sp.random(50, 30, density=0.4, random_state=rng, format="csr", dtype=np.float32),
        rng.normal(size=50).astype(np.float32),
    )
    X = sp.random(12, 30, density=0.3, random_state=rng, format="csr", dtype=np.float32)
    cand = rng.integers(0, 50, size=(12, 7))
    cand[3, 2:] = -1  # padding
    valid = cand >= 0
    full = score_candidates(X, level, cand)
    monkeypatch.setattr(inference, "FULL_PRODUCT_MAX_NODES", 10)
    level = RankerLevel(level.W, level.bias)
    assert np.allclose(score_candidates(X, level, cand)[valid], full[valid], atol=1e-5)  # batch path
    for i in range(12):  # few-document gather path
        assert np.allclose(
            score_candidates(X[i], level, cand[i : i + 1])[valid[i : i + 1]], full[i][valid[i]], atol=1e-5
        )


def test_top_k_orders_and_pads():
    ids, scores = top_k(np.array([[0.1, 0.9, -np.inf]]), np.array([[5, 6, 7]]), 4)
    assert ids.tolist() == [[6, 5, -1, -1]]
    assert scores[0, 0] == np.float64(0.9)


def test_saturated_scores_are_ranked_by_margin():
    # One cluster, three labels whose margins (2, 5, 1.5) all saturate l3-hinge at exactly 1.0.
    chain = ClusterChain(ptrs=[np.array([0, 1]), np.array([0, 3])], leaf_labels=np.array([0, 1, 2]))
    levels = [
        RankerLevel(sp.csr_matrix(np.ones((1, 1), np.float32)), np.array([5.0], np.float32)),
        RankerLevel(sp.csr_matrix(np.zeros((3, 1), np.float32)), np.array([2.0, 5.0, 1.5], np.float32)),
    ]
    pred = beam_search(sp.csr_matrix(np.ones((1, 1), np.float32)), levels, TreeIndex(chain), 1, 3)
    assert pred.scores[0].tolist() == [1.0, 1.0, 1.0]
    assert pred.labels[0].tolist() == [1, 0, 2]
