"""Label tree construction: PIFA label embeddings and balanced B-ary spherical k-means, level by level."""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict, Field
from sklearn.preprocessing import normalize
from tqdm.auto import tqdm

from models.label_tree import ClusterChain


class TreeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    branching: int = Field(16, ge=2, description="B: children per cluster")
    max_leaf_size: int = Field(100, ge=1, description="at most this many labels in a leaf cluster")
    kmeans_iters: int = Field(20, ge=1)
    seed: int = 0


def pifa_embeddings(X: sp.csr_matrix, Y: sp.csr_matrix) -> sp.csr_matrix:
    """PIFA (XR-Transformer eq. 4): v_l = normalised sum of the normalised features of l's positives."""
    V = (Y.T.tocsr().astype(np.float32) @ normalize(X, norm="l2")).tocsr()
    return normalize(V, norm="l2").astype(np.float32)


def balanced_sizes(n: int, parts: int) -> np.ndarray:
    return np.full(parts, n // parts) + (np.arange(parts) < n % parts)


def balanced_assign(S: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Assign rows to columns of a similarity matrix under exact capacities.

    Rounds of proposals: every unassigned row proposes to its best open column; a column takes its
    best proposers up to capacity and then closes, so at most one round per column. Greedy, not the
    optimal transport solution, but O(n·B) per round and it keeps clusters exactly balanced.
    """
    n, b = S.shape
    assign = np.full(n, -1, dtype=np.int64)
    remaining = sizes.astype(np.int64).copy()
    S = S.astype(np.float64, copy=True)
    S[:, remaining == 0] = -np.inf
    while (assign < 0).any():
        todo = np.flatnonzero(assign < 0)
        best = S[todo].argmax(axis=1)
        score = S[todo, best]
        order = np.lexsort((-score, best))
        best_sorted, rows_sorted = best[order], todo[order]
        starts = np.searchsorted(best_sorted, np.arange(b))
        rank = np.arange(len(order)) - starts[best_sorted]
        take = rank < remaining[best_sorted]
        assign[rows_sorted[take]] = best_sorted[take]
        np.subtract.at(remaining, best_sorted[take], 1)
        S[:, remaining == 0] = -np.inf
    return assign


def balanced_kmeans(E, parts: int, rng: np.random.Generator, iters: int) -> np.ndarray:
    """Spherical k-means into `parts` clusters whose sizes differ by at most one."""
    n = E.shape[0]
    sizes = balanced_sizes(n, parts)
    seeds = rng.choice(n, size=parts, replace=False)
    C = E[seeds]
    C = C.toarray() if sp.issparse(C) else np.asarray(C)
    assign = None
    for _ in range(iters):
        S = np.asarray(E @ C.T)
        new = balanced_assign(S, sizes)
        if assign is not None and np.array_equal(new, assign):
            break
        assign = new
        ind = sp.csr_matrix((np.ones(n, dtype=np.float32), (assign, np.arange(n))), shape=(parts, n))
        C = ind @ E
        C = C.toarray() if sp.issparse(C) else np.asarray(C)
        C = normalize(C, norm="l2")
    return assign


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


def build_tree(embeddings, config: TreeConfig | None = None, progress: bool = False) -> ClusterChain:
    """Top-down: every node of a level is split by balanced k-means into min(branching, size) children.

    Labels are kept in one permutation in which every node is a contiguous range, so a level is
    just a list of range boundaries (see ClusterChain).
    """
    config = config or TreeConfig()
    L = embeddings.shape[0]
    rng = np.random.default_rng(config.seed)
    order = np.arange(L)
    bounds = np.array([0, L])  # label ranges of the current level's nodes
    ptrs: list[np.ndarray] = []
    for branching in tqdm(level_branching(L, config), desc="label tree", disable=not progress):
        new_bounds, ptr = [0], [0]
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            members = order[lo:hi]
            parts = min(branching, hi - lo)
            if parts > 1:
                assign = balanced_kmeans(embeddings[members], parts, rng, config.kmeans_iters)
                perm = np.argsort(assign, kind="stable")
                order[lo:hi] = members[perm]
                counts = np.bincount(assign, minlength=parts)
            else:
                counts = np.array([hi - lo])
            new_bounds.extend(lo + np.cumsum(counts))
            ptr.append(ptr[-1] + parts)
        ptrs.append(np.asarray(ptr, dtype=np.int64))
        bounds = np.asarray(new_bounds, dtype=np.int64)
    # The label level: every leaf cluster's labels are its children.
    ptrs.append(bounds.astype(np.int64))
    return ClusterChain(ptrs=ptrs, leaf_labels=order.astype(np.int64))
