import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.preprocessing import normalize

from training.tree import TreeConfig, balanced_assign, build_tree, level_branching, pifa_embeddings


def test_balanced_assign_respects_capacities_and_prefers_best():
    S = np.array([[0.9, 0.1], [0.8, 0.2], [0.7, 0.6], [0.1, 0.9]])
    assign = balanced_assign(S, np.array([2, 2]))
    assert np.bincount(assign).tolist() == [2, 2]
    assert assign[0] == 0 and assign[1] == 0 and assign[3] == 1


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
