"""New labels as a subtree of their own under the root, for `xtag update --clusters new`.

The rule: the new labels get a tree of their own, built as a full run builds one (PIFA embeddings and
balanced spherical k-means, with the run's TreeConfig), and it is grafted under the root beside the old
tree's top clusters, so every level gains only new nodes and every old node keeps its place, children and
ranker. The subtree has the old tree's depth: when the new labels need fewer cluster levels, its top is a
chain of single-child nodes (one new top cluster, "is this document about any new label"); when they need
more, its top levels are merged into one wider level.

Deviation from issue 26's rule (a new label joins the nearest existing cluster: training/tree/grow.py, kept
as `--clusters refit|keep`): a new label in an old cluster makes that cluster's ranker, and every ancestor's,
out of date, and their refit is most of the update's cost once the new labels reach many clusters (10 % new
labels on debdeps reach 504 of 512 leaf clusters, and so every ranker above them). Here the only rankers
trained are the new nodes', whose documents are just those with a new label below the top new cluster, so
an update costs about what training the new labels alone costs, whatever their number. The price: a new
label does not share a cluster with the old labels it resembles, and each update adds a top cluster (the
beam sees one node more at level 1); a full retrain rebuilds one tree.

The subtree's top clusters are gates: every new label's score is multiplied by its gate's. A gate's
positives (the documents with any of its labels) are a small minority of all documents (4 % for 1 % new
labels on debdeps), so a squared-hinge ranker leaves most of them below margin 1, where l3-hinge scales
the score down (exp(−(1 − m)³)), and the new labels lost to old ones they would beat in a retrain (76 %
of the retrain's recall@5 on the added labels in that trickle). Their positives are therefore weighted
by sqrt(negatives / positives), the square root of full class balancing, and never below 1 (a gate over
most documents is left as it is; gate_positive_weights); the old tree's top clusters hold most
documents' labels and need no such weight. Measured on TEST in
bench/RESULTS.md (issue 26), where the weighting was chosen after the unweighted gate and a variant with
one gate per leaf cluster had been measured there too; rerun on a validation split of TRAIN
(bench/update_labels.py --validation), the weights raised the added labels' recall@5 on all three
experiments for 0.07-0.11 of old labels' P@5.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
from xtag.models.label_tree import ClusterChain
from xtag.training.tree.build import TreeConfig, build_tree, level_branching
from xtag.training.tree.grow import Growth


def subtree_branching(n_new: int, cluster_levels: int, config: TreeConfig) -> list[int]:
    """Children per node for the new labels' subtree below the root, with exactly `cluster_levels` cluster levels."""
    natural = level_branching(n_new, config) or [1]  # [1]: one leaf cluster of all new labels
    if len(natural) > cluster_levels:  # more levels than the tree has: the top ones merged into one
        merged = len(natural) - cluster_levels + 1
        natural = [math.prod(natural[:merged])] + natural[merged:]
    return [1] * (cluster_levels - len(natural)) + natural  # fewer: single-child nodes on top


def gate_positive_weights(Y_gates: sp.csr_matrix) -> np.ndarray:
    """Each new top cluster's positive weight, sqrt(negatives / positives) over all documents and at least 1 (module
    docstring)."""
    positives = np.asarray((Y_gates != 0).sum(axis=0), dtype=np.float64).ravel()
    return np.maximum(1.0, np.sqrt((Y_gates.shape[0] - positives) / np.maximum(positives, 1.0)))


def graft_subtree(
    chain: ClusterChain, pifa_new: sp.csr_matrix, n_old: int, config: TreeConfig, threads: int = 0
) -> Growth:
    """`chain` with labels n_old.. (PIFA rows `pifa_new`, in order) under a subtree of their own (module rule)."""
    D, n_new = chain.depth, pifa_new.shape[0]
    if D == 1:  # no cluster level: the new labels join the root's, which has no ranker
        sub = ClusterChain([np.array([0, n_new], np.int64)], np.arange(n_new, dtype=np.int64))
    else:
        sub = build_tree(pifa_new, config, threads=threads, branching=subtree_branching(n_new, D - 1, config))
    ptrs, sources, retrain = [], [], []
    for t in range(1, D + 1):  # level t: the old nodes, then the subtree's; a new node's children follow the old ones
        old_ptr, new_ptr = chain.ptrs[t - 1], sub.ptrs[t - 1]
        n_old_nodes = chain.level_size(t)
        if t == 1:
            ptr = np.array([0, n_old_nodes + int(new_ptr[-1])], np.int64)
        else:
            ptr = np.concatenate([old_ptr, old_ptr[-1] + new_ptr[1:]]).astype(np.int64)
        ptrs.append(ptr)
        n_new_nodes = int(new_ptr[-1])
        sources.append(np.concatenate([np.arange(n_old_nodes), np.full(n_new_nodes, -1)]).astype(np.int64))
        retrain.append(np.concatenate([np.zeros(n_old_nodes, bool), np.ones(n_new_nodes, bool)]))
    leaf_labels = np.concatenate([chain.leaf_labels, n_old + sub.leaf_labels]).astype(np.int64)
    facts = {
        "added_labels": n_new,
        "clusters_changed": 0,
        "clusters_added": int(sum(len(s) - chain.level_size(t) for t, s in enumerate(sources[:-1], start=1))),
    }
    return Growth(ClusterChain(ptrs, leaf_labels), sources, retrain, facts)
