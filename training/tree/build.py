"""Label tree construction: PIFA label embeddings and balanced B-ary spherical k-means, level by level."""

from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict, Field
from sklearn.preprocessing import normalize
from tqdm.auto import tqdm
from xtag.models.label_tree import ClusterChain
from xtag.models.threads import thread_count
from xtag.training.tree.balanced_kmeans import bisect, left_size
from xtag.training.tree.node_kernels import build_slice, node_state

PifaWeighting = Literal["inverse-sqrt-labels", "uniform"]


class TreeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pifa_weighting: PifaWeighting = Field(
        "inverse-sqrt-labels",
        description="a document's weight in its labels' PIFA embeddings: 1/sqrt(its label count), or 1 (eq. 4)",
    )
    branching: int = Field(16, ge=2, description="B: children per cluster")
    max_leaf_size: int = Field(100, ge=1, description="at most this many labels in a leaf cluster")
    kmeans_iters: int = Field(20, ge=1)
    seed: int = 0


def pifa_embeddings(
    X: sp.csr_matrix,
    Y: sp.csr_matrix,
    weighting: PifaWeighting = "inverse-sqrt-labels",
    labels: np.ndarray | None = None,
) -> sp.csr_matrix:
    """PIFA (XR-Transformer eq. 4): v_l = normalised sum of the normalised features of l's positives.

    Deviation from eq. 4, by default: each document is weighted by 1/sqrt(its label count), i.e. the rows
    of Y are L2-normalised first, as PECOS's PIFA does (normalized_Y). A document with many labels (debdeps
    has documents with up to 332) otherwise pulls all of its labels' embeddings towards itself. This
    weighting was the whole of a debdeps P@1 gap to PECOS, whose rankers score as ours on either tree; on
    validation splits it gains P@1 on debtags and is level on debdeps, at a small cost in tail metrics there
    (bench/RESULTS.md, "Tree or rankers"). `weighting="uniform"` is eq. 4 as written.

    `labels` (ids, ascending): the embeddings of those labels only (an update's new labels, a sub-tree's), from
    their documents only (a document's weight still counts all its labels); each row is the same floats as in
    the embeddings of all labels.

    Computed as (Xᵀ Y)ᵀ: scipy's product leaves each row's columns unsorted, and the transpose back
    sorts them for free, where sorting Yᵀ X afterwards cost as much as the product (the tree needs
    canonical rows). The entries are the same floats either way: each is summed over documents in order.
    """
    Y = Y.tocsr().astype(np.float32)
    if weighting == "inverse-sqrt-labels":
        Y = normalize(Y, norm="l2")
    if labels is not None:
        Y = Y[:, labels].tocsr()
        rows = np.flatnonzero(np.diff(Y.indptr))
        X, Y = X[rows], Y[rows]
    Xt = normalize(X, norm="l2").tocsc()  # its arrays are Xᵀ in CSR; the normalised copy is dropped at once
    Xt = sp.csr_matrix((Xt.data, Xt.indices, Xt.indptr), shape=(X.shape[1], X.shape[0]))
    V = (Xt @ Y).T.tocsr()
    return normalize(V, norm="l2").astype(np.float32)


def level_branching(n_labels: int, config: TreeConfig) -> list[int]:
    """Children per node for each cluster level, top first.

    As in PECOS, the number of leaf clusters is the smallest power of two that keeps leaves at most
    max_leaf_size labels (for B a power of two); levels below the top split B-ways and the top takes
    what remains, so 595 labels with leaves of 100 and B=16 give one level of 8 clusters.
    """
    ratio = n_labels / config.max_leaf_size
    if ratio <= 1:
        return []
    depth = max(1, math.ceil(math.log(ratio, config.branching) - 1e-12))
    top_ratio = ratio / config.branching ** (depth - 1)
    top = min(config.branching, 2 ** math.ceil(math.log2(top_ratio) - 1e-12))
    return [max(2, top)] + [config.branching] * (depth - 1)


class _Scratch(threading.local):
    """Per thread: the centroids' sums, their difference and a column marker over all features, zero between uses."""

    def __init__(self, n_features: int):
        self.S = np.zeros((n_features, 2), np.float64)
        self.D = np.zeros(n_features, np.float32)
        self.marker = np.zeros(n_features, np.bool_)


@dataclass(frozen=True)
class TreePlan:
    """The tree's shape and every bisection it takes, from the label count and the levels alone.

    Bisections split label ranges by size only (left_size), so the ranges of every node and of every
    bisection, and the global id that seeds each (node_state), are known before any embedding is read:
    a sub-tree built on its own (training/xlinear/subtrees.py) runs exactly the bisections the whole
    tree would run inside its range, with the same seeds, and comes out the same.
    """

    ptrs: list[np.ndarray]  # ClusterChain.ptrs: per cluster level its nodes' child ranges, the label level last
    rounds: list[list[np.ndarray]]  # per cluster level, per round: rows (lo, mid, hi, seed id), in id order

    @classmethod
    def of(cls, n_labels: int, levels: list[int]) -> TreePlan:
        bounds, next_id = np.array([0, n_labels], dtype=np.int64), 0
        ptrs, rounds = [], []
        for width in levels:
            lo, hi = bounds[:-1], bounds[1:]
            parts = np.minimum(width, hi - lo)
            ptrs.append(np.concatenate([[0], np.cumsum(parts)]).astype(np.int64))
            level_rounds = []
            while (parts > 1).any():
                split = parts > 1
                mid = lo + left_size(hi - lo, parts)
                ids = next_id + np.arange(int(split.sum()), dtype=np.int64)
                next_id += len(ids)
                level_rounds.append(np.stack([lo[split], mid[split], hi[split], ids], axis=1))
                # every split segment becomes its left and right halves, in place; the others stay
                first = np.cumsum(np.where(split, 2, 1)) - np.where(split, 2, 1)
                right = first[split] + 1
                n = len(first) + len(right)
                new_lo, new_hi, new_parts = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64)
                new_lo[first], new_hi[first] = lo, np.where(split, mid, hi)
                new_parts[first] = np.where(split, parts // 2, parts)
                new_lo[right], new_hi[right], new_parts[right] = mid[split], hi[split], (parts - parts // 2)[split]
                lo, hi, parts = new_lo, new_hi, new_parts
            rounds.append(level_rounds)
            bounds = np.concatenate([[0], hi]).astype(np.int64)
        ptrs.append(bounds)  # the label level: every leaf cluster's labels are its children
        return cls(ptrs, rounds)

    def within(self, lo: int, hi: int) -> list[list[np.ndarray]]:
        """The rounds' bisections inside the label range [lo, hi), shifted to start at 0 (a sub-tree's own)."""
        return [
            [r[(r[:, 0] >= lo) & (r[:, 2] <= hi)] - np.array([lo, lo, lo, 0]) for r in level] for level in self.rounds
        ]


def _csr_embeddings(embeddings) -> sp.csr_matrix:
    E = sp.csr_matrix(embeddings, dtype=np.float32)
    if not E.has_canonical_format:
        E.sum_duplicates()
    return E


def run_bisections(
    embeddings, order: np.ndarray, rounds: list[list[np.ndarray]], config: TreeConfig, threads: int = 0, progress=False
) -> np.ndarray:
    """Run the planned bisections (TreePlan rounds) on `order` (rows of `embeddings`, one per label position),
    which is reordered in place and returned: every round's bisections side by side in `threads` threads.

    Columns are renumbered by descending frequency (the slice of all rows): the centroid entries that most
    labels touch share a few cache lines, which is what the bisections' scatter and gather hit. The bisection
    reads each row's entries in their stored order, so the renumbering (which depends on the rows given)
    changes no float: a sub-tree's rows alone bisect as they do among all labels.
    """
    E = _csr_embeddings(embeddings)
    L, d = E.shape
    indptr, indices, data, _, used = build_slice(
        E.indptr.astype(np.int64), E.indices.astype(np.int32), E.data, np.arange(L), d
    )
    scratch = _Scratch(len(used))

    def run(job: np.ndarray) -> None:
        lo, mid, hi, seed_id = (int(v) for v in job)
        rows = order[lo:hi]  # a view: bisect reorders the node's labels in place, the first mid - lo on the left
        state = node_state(config.seed, seed_id)
        bisect(indptr, indices, data, rows, mid - lo, config.kmeans_iters, state, scratch.S, scratch.D, scratch.marker)

    with ThreadPoolExecutor(max_workers=threads or thread_count()) as pool:
        for level in tqdm(rounds, desc="label tree", disable=not progress):
            for jobs in level:
                list(pool.map(run, jobs))
    return order


def build_tree(
    embeddings,
    config: TreeConfig | None = None,
    progress: bool = False,
    threads: int = 0,
    branching: list[int] | None = None,
) -> ClusterChain:
    """Top-down: every node of a level is split into min(branching, size) balanced children.

    Labels are kept in one permutation in which every node is a contiguous range, so a level is
    just a list of range boundaries (see ClusterChain). A node is split by recursive balanced
    2-means (training/tree/balanced_kmeans.py); all bisections of a round run side by side in `threads`
    threads (0: all cores), each seeded from (seed, its own id), so the tree does not depend on
    the thread count. `branching` (children per node, top level first; 1 = a single child) replaces
    level_branching's, for a tree whose depth is given (training/tree/graft.py).
    """
    config = config or TreeConfig()
    E = _csr_embeddings(embeddings)
    L = E.shape[0]
    plan = TreePlan.of(L, level_branching(L, config) if branching is None else branching)
    order = run_bisections(E, np.arange(L), plan.rounds, config, threads, progress)
    return ClusterChain(ptrs=plan.ptrs, leaf_labels=order.astype(np.int64))
