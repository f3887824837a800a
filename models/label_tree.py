"""The label tree as data: the cluster chain C(1..D) that beam search walks from coarse to fine."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from xtag.models.errors import XtagError, reading
from xtag.models.files import index_bounds
from xtag.models.files.atomic import write_atomic


@dataclass
class ClusterChain:
    """Children of node p at level t are nodes ptrs[t][p]..ptrs[t][p+1]-1 of level t+1.

    Level 0 is the root (one node); the last level's nodes are the labels, in the tree's order:
    node j of the last level is label `leaf_labels[j]`. Keeping children contiguous lets beam search
    expand a node with a slice instead of a lookup table.
    """

    ptrs: list[np.ndarray]
    leaf_labels: np.ndarray

    def __post_init__(self) -> None:
        """Every pointer array runs from 0 without decreasing and has one entry per parent plus one; the leaves
        are the labels, each once: beam search and the engine index with them unchecked (models/files/index_bounds.py)."""
        if not self.ptrs:
            raise XtagError("cluster chain: no levels")
        for t, ptr in enumerate(self.ptrs):
            index_bounds.integers(f"ptr_{t}", ptr)
            parents = 1 if t == 0 else int(self.ptrs[t - 1][-1])  # level 0 is the single root
            index_bounds.pointer(f"ptr_{t}", ptr, int(ptr[-1]) if len(ptr) else 0, parents + 1)
        index_bounds.permutation(
            "leaf_labels", index_bounds.integers("leaf_labels", self.leaf_labels), int(self.ptrs[-1][-1])
        )

    @property
    def depth(self) -> int:
        """Number of ranker levels (cluster levels plus the label level)."""
        return len(self.ptrs)

    def level_size(self, t: int) -> int:
        """Nodes at level t (1..depth); level `depth` are the labels."""
        return int(self.ptrs[t - 1][-1])

    @property
    def n_labels(self) -> int:
        return len(self.leaf_labels)

    def parents(self, t: int) -> np.ndarray:
        """Parent (level t-1 index) of every node at level t."""
        ptr = self.ptrs[t - 1]
        return np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))

    def child_table(self, t: int) -> np.ndarray:
        """Level t-1 × max-branching table of level-t children, -1 padded."""
        ptr = self.ptrs[t - 1]
        counts = np.diff(ptr)
        width = int(counts.max()) if len(counts) else 0
        table = np.full((len(counts), width), -1, dtype=np.int64)
        offsets = np.arange(width)
        mask = offsets[None, :] < counts[:, None]
        table[mask] = (ptr[:-1, None] + offsets[None, :])[mask]
        return table

    def ancestors(self, t: int) -> np.ndarray:
        """For every label id, the index of its ancestor at level t (t = depth gives the leaf node)."""
        node_of_label = np.empty(self.n_labels, dtype=np.int64)
        node_of_label[self.leaf_labels] = np.arange(self.n_labels)
        nodes = node_of_label
        for level in range(self.depth, t, -1):
            nodes = self.parents(level)[nodes]
        return nodes

    def level_targets(self, Y: sp.csr_matrix, t: int) -> sp.csr_matrix:
        """Y^(t): a document is positive for a node when any label below it is (max-pooling, eq. 5)."""
        anc = self.ancestors(t)
        A = sp.csr_matrix(
            (np.ones(len(anc), dtype=np.float32), (np.arange(len(anc)), anc)), shape=(self.n_labels, self.level_size(t))
        )
        Yt = (Y @ A).tocsr()
        Yt.data[:] = 1.0
        return Yt

    def save(self, path: Path) -> None:
        """Atomically (models/files/atomic.py): a training checkpoint killed mid-write keeps the previous file."""
        arrays = {f"ptr_{t}": p for t, p in enumerate(self.ptrs)}
        write_atomic(path, lambda fh: np.savez(fh, leaf_labels=self.leaf_labels, **arrays))

    @classmethod
    def load(cls, path: Path) -> ClusterChain:
        """Raises an XtagError naming the file and the cause when it is empty, truncated or inconsistent."""
        with reading(path, "the label tree"), np.load(path, allow_pickle=False) as z:
            n = sum(1 for k in z.files if k.startswith("ptr_"))
            arrays = [index_bounds.integers(f"ptr_{t}", z[f"ptr_{t}"]) for t in range(n)]
            return cls(
                [a.astype(np.int64) for a in arrays],
                index_bounds.integers("leaf_labels", z["leaf_labels"]).astype(np.int64),
            )

    @classmethod
    def load_tree(cls, folder: Path) -> ClusterChain:
        """The bundle's label-tree component (folder/chain.npz)."""
        return cls.load(folder / "chain.npz")
