import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.preprocessing import normalize
from xtag.training.tree.balanced_kmeans import bisect
from xtag.training.tree.build import TreeConfig, build_tree, level_branching, pifa_embeddings
from xtag.training.tree.node_kernels import node_state


def test_bisection_cuts_at_the_capacity_and_separates_groups():
    # Two tight groups of unit vectors, shuffled: a bisection with capacity 6 on the left must
    # return one group first, whichever it is.
    rng = np.random.default_rng(0)
    E = normalize(np.repeat(np.eye(2, 5), 6, axis=0) + rng.normal(0, 0.05, (12, 5)))
    E = sp.csr_matrix(E, dtype=np.float32)
    rows = rng.permutation(12)
    S, D, marker = np.zeros((5, 2)), np.zeros(5, np.float32), np.zeros(5, np.bool_)
    bisect(E.indptr.astype(np.int64), E.indices.astype(np.int32), E.data, rows, 6, 20, node_state(0, 0), S, D, marker)
    assert {tuple(sorted(rows[:6] // 6)), tuple(sorted(rows[6:] // 6))} == {(0,) * 6, (1,) * 6}
    assert not S.any() and not D.any() and not marker.any()  # the scratch is handed back zeroed


def test_uneven_splits_give_sizes_that_differ_by_at_most_one():
    E = normalize(np.random.default_rng(2).standard_normal((23, 5)))
    chain = build_tree(E, TreeConfig(branching=7, max_leaf_size=4))
    assert sorted(np.diff(chain.ptrs[-1]).tolist()) == sorted([4, 4, 3, 3, 3, 3, 3])


def test_tree_does_not_depend_on_the_thread_count():
    E = normalize(np.random.default_rng(5).standard_normal((500, 12)))
    one = build_tree(E, TreeConfig(branching=4, max_leaf_size=10), threads=1)
    two = build_tree(E, TreeConfig(branching=4, max_leaf_size=10), threads=2)
    assert (one.leaf_labels == two.leaf_labels).all()


@pytest.mark.parametrize("n_labels, branching, leaf", [(2, 16, 100), (37, 2, 4), (1000, 4, 30), (595, 16, 100)])
def test_tree_partitions_every_label_into_small_leaves(n_labels, branching, leaf):
    E = normalize(np.random.default_rng(0).standard_normal((n_labels, 8)))
    chain = build_tree(E, TreeConfig(branching=branching, max_leaf_size=leaf))
    assert sorted(chain.leaf_labels.tolist()) == list(range(n_labels))
    leaf_sizes = np.diff(chain.ptrs[-1])
    assert leaf_sizes.max() <= leaf and leaf_sizes.max() - leaf_sizes.min() <= 1
    for t in range(1, chain.depth):
        assert np.diff(chain.ptrs[t - 1]).max() <= branching


def test_tree_is_deterministic_under_a_seed():
    E = normalize(np.random.default_rng(1).standard_normal((300, 16)))
    a = build_tree(E, TreeConfig(branching=4, max_leaf_size=10, seed=3))
    b = build_tree(E, TreeConfig(branching=4, max_leaf_size=10, seed=3))
    c = build_tree(E, TreeConfig(branching=4, max_leaf_size=10, seed=4))
    assert (a.leaf_labels == b.leaf_labels).all()
    assert not (a.leaf_labels == c.leaf_labels).all()


def test_kmeans_groups_similar_labels_together():
    # Two well separated groups of label embeddings must end in different top clusters.
    rng = np.random.default_rng(0)
    E = np.vstack([rng.normal([5, 0], 0.1, (20, 2)), rng.normal([0, 5], 0.1, (20, 2))])
    chain = build_tree(normalize(E), TreeConfig(branching=2, max_leaf_size=20))
    top = chain.ancestors(1)
    assert len(set(top[:20])) == 1 and len(set(top[20:])) == 1 and top[0] != top[20]


def test_level_branching_matches_pecos_leaf_rule():
    assert level_branching(595, TreeConfig(branching=16, max_leaf_size=100)) == [8]
    assert level_branching(100, TreeConfig(max_leaf_size=100)) == []
    assert level_branching(1_000_000, TreeConfig(branching=16, max_leaf_size=100)) == [4, 16, 16, 16]


def test_pifa_and_level_targets_max_pool():
    X = sp.csr_matrix(np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype=np.float32))
    Y = sp.csr_matrix(np.array([[1, 0, 0, 0], [0, 1, 0, 1], [0, 0, 1, 0]], dtype=np.float32))
    V = pifa_embeddings(X, Y).toarray()
    assert np.allclose(np.linalg.norm(V, axis=1), 1)
    assert np.allclose(V[1], V[3])  # same positives → same embedding
    chain = build_tree(pifa_embeddings(X, Y), TreeConfig(branching=2, max_leaf_size=2))
    Y1 = chain.level_targets(Y, 1).toarray()
    for i in range(3):
        expected = {chain.ancestors(1)[j] for j in np.flatnonzero(Y[i].toarray())}
        assert set(np.flatnonzero(Y1[i])) == expected


def test_pifa_weighting_discounts_documents_with_many_labels():
    """Label 0 is on a one-label document (feature 0) and on a four-label one (feature 1).

    Eq. 4 as written gives both documents weight 1; the default weighs each by 1/sqrt(its label count),
    so feature 0 dominates label 0's embedding 2 : 1.
    """
    X = sp.csr_matrix(np.array([[1, 0], [0, 1]], dtype=np.float32))
    Y = sp.csr_matrix(np.array([[1, 0, 0, 0], [1, 1, 1, 1]], dtype=np.float32))
    uniform = pifa_embeddings(X, Y, "uniform").toarray()
    weighted = pifa_embeddings(X, Y).toarray()
    assert np.allclose(uniform[0], [2**-0.5, 2**-0.5])
    assert np.allclose(weighted[0], np.array([1.0, 0.5]) / np.sqrt(1.25))
    assert np.allclose(weighted[1:], [0, 1]) and np.allclose(uniform[1:], [0, 1])
    assert TreeConfig().pifa_weighting == "inverse-sqrt-labels"
