"""New labels into an existing label tree, for `xtag update --clusters refit|keep`: which nodes move, and which
rankers must be retrained (the default, `--clusters new`, grafts a subtree of their own instead: graft.py).

The rule (issue 26): a new label joins the leaf cluster whose centroid is nearest (cosine) to its PIFA
embedding; a centroid is the normalised sum of its old labels' PIFA embeddings, all computed on the
update's combined corpus. A leaf cluster that then holds more than `max_leaf_size` labels is split
into the fewest balanced clusters that fit, by the same balanced spherical k-means that built the tree
(build_tree on its labels), the pieces staying children of the same parent. Nothing else moves.

What is retrained (the issue's "only the new labels and the clusters whose children changed"): the
new labels' rankers; the rankers of the clusters that gained labels, and of their ancestors (their
positives gained the new labels' documents; without them the beam would not route those documents
into the cluster; on a two-level tree the only ancestor is the root, which has no ranker); after a
split, every child of the split cluster's parent and every label of the pieces (their parent is new).
Every other ranker is copied as it was, including the old labels' rankers in a cluster that only
gained labels: their positives are unchanged, and their negatives (the cluster's documents) gained
only the new labels' documents. So an old label keeps its exact scores where its cluster and the
cluster's ancestors were not retrained.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from sklearn.preprocessing import normalize
from xtag.models.label_tree import ClusterChain
from xtag.training.tree.build import TreeConfig, build_tree


@dataclass
class Growth:
    """The grown tree; per level t (index t-1), each node's old index (-1: new) and whether it is retrained."""

    chain: ClusterChain
    sources: list[np.ndarray]
    retrain: list[np.ndarray]
    facts: dict


def nearest_clusters(chain: ClusterChain, pifa: sp.csr_matrix, n_old: int) -> np.ndarray:
    """For every new label (ids n_old..), the leaf cluster (level depth-1 node) nearest to its PIFA embedding."""
    t = chain.depth - 1
    cluster_of_old = chain.ancestors(t)[:n_old] if t > 0 else np.zeros(n_old, np.int64)
    n_clusters = chain.level_size(t) if t > 0 else 1
    A = sp.csr_matrix((np.ones(n_old, np.float32), (cluster_of_old, np.arange(n_old))), shape=(n_clusters, n_old))
    centroids = normalize(A @ pifa[:n_old], norm="l2")
    similarity = (pifa[n_old:] @ centroids.T).toarray()
    return similarity.argmax(axis=1).astype(np.int64)


def _split(members: np.ndarray, pifa: sp.csr_matrix, max_leaf_size: int, seed: int) -> list[np.ndarray]:
    """An overflowing cluster's labels in the fewest balanced pieces of at most max_leaf_size (a power of two)."""
    parts = 2 ** math.ceil(math.log2(len(members) / max_leaf_size))
    sub = build_tree(pifa[members], TreeConfig(branching=parts, max_leaf_size=max_leaf_size, seed=seed), threads=1)
    bounds = sub.ptrs[-1]
    return [members[sub.leaf_labels[lo:hi]] for lo, hi in zip(bounds[:-1], bounds[1:])]


def grow_tree(
    chain: ClusterChain, pifa: sp.csr_matrix, n_old: int, max_leaf_size: int, seed: int = 0, refit_clusters: bool = True
) -> Growth:
    """Add labels n_old..len(pifa)-1 to `chain` (labels keep their ids; see the module's rule).

    refit_clusters=False keeps the rankers of clusters that only gained labels, and of their ancestors (the
    cheaper variant bench/update_labels.py measures): a new label's documents must then be routed by the
    old cluster rankers, which the PIFA rule makes likely (they resemble the cluster's documents)."""
    D, n_new = chain.depth, pifa.shape[0] - n_old
    if D == 1:  # no cluster level: the root is the one cluster, which has no ranker and is never split
        leaf_labels = np.concatenate([chain.leaf_labels, np.arange(n_old, n_old + n_new)])
        new_chain = ClusterChain([np.array([0, len(leaf_labels)], np.int64)], leaf_labels)
        changed = n_new > 0
        src = np.concatenate([np.arange(n_old), np.full(n_new, -1)])
        facts = {"added_labels": n_new, "clusters_changed": int(changed), "clusters_added_by_splits": 0}
        return Growth(new_chain, [src], [np.full(len(src), changed)], facts)

    t_c = D - 1  # the leaf clusters' level
    n_clusters = chain.level_size(t_c)
    cluster_parent = chain.parents(t_c)  # at level D-2 (the root: all 0)
    leaf_ptr = chain.ptrs[D - 1]
    members = [chain.leaf_labels[leaf_ptr[c] : leaf_ptr[c + 1]] for c in range(n_clusters)]
    target = nearest_clusters(chain, pifa, n_old)
    changed = np.zeros(n_clusters, bool)
    for label, c in zip(range(n_old, n_old + n_new), target):
        members[c] = np.append(members[c], label)
        changed[c] = True
    # Overflow: the cluster keeps its slot for the first piece; the others are new clusters under its parent.
    extra_members, extra_parent, split_parents, split_clusters = [], [], set(), []
    for c in np.flatnonzero(changed):
        if len(members[c]) > max_leaf_size:
            pieces = _split(members[c], pifa, max_leaf_size, seed + int(c))
            members[c] = pieces[0]
            extra_members += pieces[1:]
            extra_parent += [int(cluster_parent[c])] * (len(pieces) - 1)
            split_parents.add(int(cluster_parent[c]))
            split_clusters.append(int(c))
    all_members = members + extra_members
    all_parent = np.concatenate([cluster_parent, np.asarray(extra_parent, np.int64)])
    is_new_cluster = np.arange(len(all_members)) >= n_clusters
    members_changed = np.concatenate([changed, np.ones(len(extra_members), bool)])
    was_split = np.concatenate([np.isin(np.arange(n_clusters), split_clusters), np.ones(len(extra_members), bool)])
    # a split changes its parent's children: all of them (the clusters, not their labels) are retrained
    structural = np.concatenate([np.zeros(n_clusters, bool), np.ones(len(extra_members), bool)])
    structural |= np.isin(all_parent, list(split_parents))
    cluster_retrain = (members_changed if refit_clusters else was_split) | structural
    order = np.argsort(all_parent, kind="stable")  # children contiguous; old clusters keep their relative order
    n_parents = 1 if t_c == 1 else chain.level_size(t_c - 1)
    ptr_c = np.concatenate([[0], np.cumsum(np.bincount(all_parent, minlength=n_parents))]).astype(np.int64)
    ordered = [all_members[c] for c in order]
    leaf_labels = np.concatenate(ordered).astype(np.int64)
    ptr_leaf = np.concatenate([[0], np.cumsum([len(m) for m in ordered])]).astype(np.int64)
    new_chain = ClusterChain([*chain.ptrs[: t_c - 1], ptr_c, ptr_leaf], leaf_labels)

    # Per level: old index of each node (-1: new) and whether its ranker is retrained.
    sources, retrain = [], []
    refit = changed if refit_clusters else np.isin(np.arange(n_clusters), split_clusters)
    up = np.unique(cluster_parent[np.flatnonzero(refit)])  # ancestors at level t_c - 1, then upwards
    for t in range(t_c - 1, 0, -1):  # levels above the clusters keep their nodes; ancestors are retrained
        mask = np.zeros(chain.level_size(t), bool)
        mask[up] = True
        sources.insert(0, np.arange(chain.level_size(t)))
        retrain.insert(0, mask)
        up = np.unique(chain.parents(t)[up])
    sources.append(np.where(is_new_cluster[order], -1, order))
    retrain.append(cluster_retrain[order])
    node_of_label = np.empty(n_old, np.int64)
    node_of_label[chain.leaf_labels] = np.arange(n_old)
    sources.append(np.where(leaf_labels < n_old, node_of_label[np.minimum(leaf_labels, n_old - 1)], -1))
    in_split = np.repeat(was_split[order], np.diff(ptr_leaf))
    retrain.append((leaf_labels >= n_old) | in_split)  # new labels, and every label of a split cluster
    facts = {
        "added_labels": n_new,
        "clusters_changed": int(changed.sum()),
        "clusters_added_by_splits": len(extra_members),
    }
    return Growth(new_chain, sources, retrain, facts)
