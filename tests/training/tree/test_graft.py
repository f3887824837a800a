"""`xtag update --clusters new`: the new labels' own subtree, grafted under the root at the old tree's depth."""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.preprocessing import normalize
from xtag.training.tree.build import TreeConfig, build_tree
from xtag.training.tree.graft import gate_positive_weights, graft_subtree, subtree_branching

CONFIG = TreeConfig(branching=4, max_leaf_size=5)


# n_new -> new top clusters: one leaf under one top cluster; 4 leaves under one; 2 × 4 leaves (as deep as the tree);
# 64 leaves needing 3 cluster levels where the tree has 2 (the top two merged: 16 top clusters of 4 leaves)
@pytest.mark.parametrize("n_new, tops", [(3, 1), (12, 1), (40, 2), (300, 16)])
def test_the_new_labels_get_a_subtree_of_the_old_trees_depth_and_nothing_old_moves(n_new, tops):
    rng = np.random.default_rng(n_new)
    old = build_tree(normalize(rng.standard_normal((80, 8))), CONFIG)  # 16 leaves of 5 under 4 clusters: depth 3
    assert old.depth == 3
    growth = graft_subtree(old, normalize(rng.standard_normal((n_new, 8))), 80, CONFIG)
    new = growth.chain
    assert new.depth == old.depth and sorted(new.leaf_labels.tolist()) == list(range(80 + n_new))
    assert (new.leaf_labels[:80] == old.leaf_labels).all()
    for t in range(1, old.depth + 1):
        n = old.level_size(t)
        assert (new.ptrs[t - 1][: len(old.ptrs[t - 1])] == old.ptrs[t - 1]).all() or t == 1  # old children kept
        assert (growth.sources[t - 1][:n] == np.arange(n)).all() and (growth.sources[t - 1][n:] == -1).all()
        assert not growth.retrain[t - 1][:n].any() and growth.retrain[t - 1][n:].all()
    new_ids = np.arange(80, 80 + n_new)
    assert (new.ancestors(1)[new_ids] >= old.level_size(1)).all()  # every new label below a new top cluster
    assert (new.ancestors(1)[:80] == old.ancestors(1)).all()
    assert new.level_size(1) - old.level_size(1) == tops
    assert np.diff(new.ptrs[-1])[old.level_size(old.depth - 1) :].max() <= CONFIG.max_leaf_size


def test_subtree_branching_pads_with_single_children_on_top_and_merges_extra_levels():
    assert subtree_branching(3, 2, CONFIG) == [1, 1]  # one leaf cluster, under one new top cluster
    assert subtree_branching(12, 2, CONFIG) == [1, 4]  # 12 labels: 4 leaves of at most 5
    assert subtree_branching(300, 1, CONFIG) == [64]  # 64 leaves of at most 5, all at the one cluster level
    assert subtree_branching(300, 2, CONFIG) == [16, 4]


def test_a_gates_positives_weigh_the_square_root_of_the_class_ratio_and_never_less_than_one():
    # 100 documents: a gate with 4 positives (96 negatives), one with 50, one with 90
    rows = [*range(4), *range(50), *range(90)]
    cols = [0] * 4 + [1] * 50 + [2] * 90
    Y = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(100, 3))
    np.testing.assert_allclose(gate_positive_weights(Y), [np.sqrt(96 / 4), 1.0, 1.0])
