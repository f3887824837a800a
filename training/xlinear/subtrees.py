"""XR-Linear split into its top levels and the sub-trees below them, each part trained on its own.

The unit of distributed training (training/xlinear/ray_train.py; nothing here imports Ray). The whole
tree's shape and the seed of every bisection follow from the label count alone (TreePlan), and a ranker's
seed from its node's place in its level, so each part computes exactly the arrays that the whole run
(train_xlinear) computes for it:

- the top (`train_top`): PIFA of all labels, the bisections of the levels down to the split level, and the
  rankers of those levels;
- a sub-tree (`train_subtree`), rooted at one node of the split level: its labels' PIFA rows, the
  bisections inside its label range, and the rankers of every level below its root.

Only teacher-forced negatives split this way: a matcher-aware shortlist of a level needs the whole level
above it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from xtag.models.inference.types import RankerLevel
from xtag.models.label_tree import ClusterChain
from xtag.training.tree.build import TreePlan, pifa_embeddings, run_bisections
from xtag.training.weighting.label_weights import LabelWeights
from xtag.training.xlinear.config import XLinearConfig
from xtag.training.xlinear.train import fit_chain_level


@dataclass(frozen=True)
class Subtree:
    """Sub-tree `index`: node `index` of cluster level `level` and everything below it.

    Its labels are positions [lo, hi) of the tree's label order; `ptrs` is its own chain's shape (its root's
    children first, its labels last, numbered from 0) and `first[s]` its first node in level `level + 1 + s`
    (the last: `lo`, its first label position);
    `rounds` are the bisections inside [lo, hi), shifted to start at 0.
    """

    level: int
    index: int
    lo: int
    hi: int
    ptrs: list[np.ndarray]
    first: list[int]
    rounds: list[list[np.ndarray]]


def split(plan: TreePlan, level: int) -> list[Subtree]:
    """The sub-trees rooted at the nodes of cluster level `level` (1 = the root's children), in tree order."""
    out = []
    for node in range(int(plan.ptrs[level - 1][-1])):
        a, b, ptrs, first = node, node + 1, [], []
        for ptr in plan.ptrs[level:]:
            ptrs.append(ptr[a : b + 1] - ptr[a])
            a, b = int(ptr[a]), int(ptr[b])
            first.append(a)
        out.append(Subtree(level, node, a, b, ptrs, first, plan.within(a, b)))
    return out


def split_level(plan: TreePlan, cpus: int, per_cpu: int = 2) -> int:
    """The shallowest cluster level with at least `per_cpu` nodes for each CPU (else the deepest): enough
    sub-trees to keep every CPU busy while the longest ones run, each as large as that allows."""
    sizes = [int(ptr[-1]) for ptr in plan.ptrs]  # nodes of levels 1.. (the last entry: labels)
    for level, size in enumerate(sizes[:-1], start=1):
        if size >= per_cpu * cpus:
            return level
    return len(sizes) - 1


def _weights_of(weighted: LabelWeights | None, labels: np.ndarray) -> LabelWeights | None:
    return None if weighted is None else LabelWeights(weighted.weights[labels], weighted.freq[labels], weighted.facts)


def train_top(
    X: sp.csr_matrix, Y: sp.csr_matrix, plan: TreePlan, level: int, config: XLinearConfig, weighted: LabelWeights | None
) -> tuple[np.ndarray, list[RankerLevel]]:
    """The label order after the top `level` cluster levels, and those levels' rankers."""
    L = Y.shape[1]
    order = run_bisections(
        pifa_embeddings(X, Y, config.tree.pifa_weighting), np.arange(L), plan.rounds[:level], config.tree, config.n_jobs
    )
    bounds = np.arange(int(plan.ptrs[level - 1][-1]) + 1)  # the split level's nodes' label ranges
    for ptr in plan.ptrs[level:]:
        bounds = ptr[bounds]
    chain = ClusterChain([*plan.ptrs[:level], bounds], order.astype(np.int64))
    levels: list[RankerLevel] = []
    for t in range(1, level + 1):
        levels.append(fit_chain_level(X, Y, chain, t, levels, config, weighted, progress=False))
    return order, levels


def train_subtree(
    X: sp.csr_matrix,
    Y: sp.csr_matrix,
    part: Subtree,
    labels: np.ndarray,
    config: XLinearConfig,
    weighted: LabelWeights | None,
) -> tuple[np.ndarray, list[RankerLevel]]:
    """Sub-tree `part`, whose labels `labels` (ids) the top levels put at positions part.lo..part.hi: its labels
    in their final order, and its rankers level by level (rows: its nodes, in order).

    Its labels are numbered by ascending id inside the sub-tree, so every per-label sum (PIFA, the
    missing-label node weights) runs in the whole run's order and gives the same floats.
    """
    own = np.sort(labels)
    E = pifa_embeddings(X, Y, config.tree.pifa_weighting, own)
    order = run_bisections(E, np.searchsorted(own, labels), part.rounds, config.tree, config.n_jobs)
    del E
    chain = ClusterChain(part.ptrs, order.astype(np.int64))
    Ys = Y[:, own].tocsr()
    docs = np.flatnonzero(np.diff(Ys.indptr))  # the documents the sub-tree's root sees: those with one of its labels
    root = sp.csc_matrix(
        (np.ones(len(docs), np.float32), (docs, np.zeros(len(docs), np.int64))), shape=(len(Ys.indptr) - 1, 1)
    )
    levels: list[RankerLevel] = []
    for s in range(1, chain.depth + 1):
        level = fit_chain_level(
            X,
            Ys,
            chain,
            s,
            levels,
            config,
            _weights_of(weighted, own),
            progress=False,
            root=root,
            first_node=part.first[s - 1],
        )
        levels.append(level)
    return own[order], levels
