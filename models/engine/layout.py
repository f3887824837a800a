"""The rankers rearranged for compiled beam search: one column-major chunk per sibling group (PECOS's MSCSR).

Beam search only ever scores all children of a kept parent together, so the weights of one parent's
children are stored as one chunk: for each feature any of them uses, the (child, weight) pairs. A
document's features are then looked up once per chunk instead of once per (child, weight) as the
numpy path does. Built once per loaded model from the `RankerLevel`s and the `ClusterChain`.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from xtag.models.engine.jit import njit
from xtag.models.errors import reading
from xtag.models.files.atomic import write_atomic, write_text_atomic
from xtag.models.inference.types import RankerLevel
from xtag.models.label_tree import ClusterChain

HASH_MULTIPLIER = 2654435761  # Fibonacci hashing: slot = top bits of (feature · 2^32/φ) mod 2^32
# Deviation from PECOS: levels with at most this many sibling groups are also stored feature-major (CSC over
# the whole level), and scored that way when the beam keeps enough of their parents (kernels.py): one lookup
# per document feature instead of one per (feature, kept chunk). Measured: debtags (8 groups) 55 -> 30 µs a
# document; debdeps (2, 32, 512 groups) -25% with levels 1-3 feature-major, but slower with the 512-group
# leaf level too (its rows are long), so large levels stay chunked only. Costs a second copy of those levels.
FEATURE_MAJOR_MAX_CHUNKS = 64
# The names of CompiledLevels.arrays, in order: the files of a saved layout (rankers/engine/NAME.npy in a bundle).
ARRAY_NAMES = (
    "chunk_base", "node_base", "chunk_child0", "chunk_nchild", "chunk_fptr", "feat_id", "feat_eptr", "ent_child",
    "ent_w", "chunk_hptr", "chunk_hshift", "table", "bias", "dense", "fm_base", "fm_ptr", "fm_node", "fm_w",
)  # fmt: skip
LAYOUT_FILE = "layout.json"


@njit()
def _fill_hash(chunk_fptr, chunk_hptr, chunk_hshift, feat_id, table):
    """Open-addressing (linear probing) table per chunk: slot = feature id << 32 | its index in the chunk.

    Key and value share one int64 so a lookup touches one cache line (-1: empty slot).
    """
    for c in range(chunk_fptr.size - 1):
        h0 = chunk_hptr[c]
        mask = chunk_hptr[c + 1] - h0 - 1
        for j in range(chunk_fptr[c], chunk_fptr[c + 1]):
            f = np.int64(feat_id[j])
            s = ((f * HASH_MULTIPLIER) & 0xFFFFFFFF) >> chunk_hshift[c]
            while table[h0 + s] >= 0:
                s = (s + 1) & mask
            table[h0 + s] = (f << 32) | (j - chunk_fptr[c])


def _dense_start(levels: list[RankerLevel]) -> int | None:
    starts = {level.dense_start for level in levels if level.dense_start is not None}
    if len(starts) > 1:
        raise ValueError(f"ranker levels have different dense tails (starts {sorted(starts)})")
    return starts.pop() if starts else None


@dataclass
class CompiledLevels:
    """Every level's chunks, flattened into one set of arrays (what the kernels take as `arrays`).

    Chunk g = chunk_base[t] + p holds the children of node p of level t-1: level-t nodes
    chunk_child0[g] .. + chunk_nchild[g]. Its features are feat_id[chunk_fptr[g]:chunk_fptr[g+1]]
    (sorted), feature j's entries ent_child/ent_w[feat_eptr[j]:feat_eptr[j+1]] (child offset in the
    chunk, weight), and table[chunk_hptr[g]:chunk_hptr[g+1]] a hash of its features (_fill_hash). Node arrays
    (bias, dense tail rows) are indexed node_base[t] + node. A level t with fm_base[t] ≥ 0 is also stored
    feature-major: feature f's (node, weight) pairs are fm_node/fm_w[fm_ptr[fm_base[t] + f] : ... + f + 1]].
    """

    depth: int
    n_features: int  # sparse columns the chunks cover: all of them, or those before the dense tail
    dense_start: int | None
    leaf_labels: np.ndarray
    max_width: int
    max_feature_major_nodes: int  # size of the per-thread score buffer for feature-major levels
    arrays: tuple
    local: threading.local = field(default_factory=threading.local, repr=False)  # per-thread workspaces (search.py)

    @property
    def dims(self) -> int:
        return self.arrays[13].shape[1]

    @property
    def widest(self) -> int:
        """Most nodes on one level: no beam needs to be wider."""
        return max(int(np.diff(self.arrays[1]).max()), 1)

    @property
    def nbytes(self) -> int:
        return int(sum(a.nbytes for a in self.arrays))

    @classmethod
    def build(cls, levels: list[RankerLevel], chain: ClusterChain) -> CompiledLevels:
        """Chunks from each level's CSR weights; a level's dense tail (Φ_cat) is kept as dense rows."""
        if len(levels) != chain.depth:
            raise ValueError(f"{len(levels)} ranker levels for a tree of depth {chain.depth}")
        start = _dense_start(levels)
        n_cols = levels[0].W.shape[1]
        sparse_cols = n_cols if start is None else start
        chunk_base, node_base = np.zeros(chain.depth + 2, np.int64), np.zeros(chain.depth + 2, np.int64)
        child0, nchild, keys, children, weights, bias, dense = [], [], [], [], [], [], []
        fm_base, fm_ptr, fm_node, fm_w, fm_entries, fm_nodes = np.full(chain.depth + 2, -1, np.int64), [], [], [], 0, 0
        for t, level in enumerate(levels, start=1):
            ptr = chain.ptrs[t - 1].astype(np.int64)
            if level.n_nodes != ptr[-1]:
                raise ValueError(f"level {t} has {level.n_nodes} nodes, the tree {ptr[-1]}")
            chunk_base[t + 1] = chunk_base[t] + len(ptr) - 1
            node_base[t + 1] = node_base[t] + level.n_nodes
            child0.append(ptr[:-1])
            nchild.append(np.diff(ptr))
            W = level.W.tocsr()
            rows = np.repeat(np.arange(W.shape[0]), np.diff(W.indptr))
            keep = (W.indices < sparse_cols) & (W.data != 0)
            rows, cols, vals = rows[keep], W.indices[keep].astype(np.int64), W.data[keep].astype(np.float32)
            parent = np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))[rows]
            keys.append((chunk_base[t] + parent) * sparse_cols + cols)
            if len(ptr) - 1 <= FEATURE_MAJOR_MAX_CHUNKS:
                csc = level.W[:, :sparse_cols].tocsc()
                csc.eliminate_zeros()
                fm_base[t] = len(fm_ptr) * (sparse_cols + 1)
                fm_ptr.append(csc.indptr.astype(np.int64) + fm_entries)
                fm_node.append(csc.indices.astype(np.int32))
                fm_w.append(csc.data.astype(np.float32))
                fm_entries += csc.nnz
                fm_nodes = max(fm_nodes, level.n_nodes)
            children.append((rows - ptr[:-1][parent]).astype(np.int32))
            weights.append(vals)
            bias.append(np.asarray(level.bias, np.float32))
            if start is not None:
                tail = level.W[:, start:].toarray()  # not level.dense: that would keep a copy the engine never reads
                dense.append(np.asarray(tail, np.float32))
        key = np.concatenate(keys)
        order = np.argsort(key, kind="stable")  # by (chunk, feature); rows stay in order within
        key = key[order]
        first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(key) else np.zeros(0, np.int64)
        feat_chunk, feat_id = np.divmod(key[first], max(sparse_cols, 1))
        n_chunks = int(chunk_base[chain.depth + 1])
        chunk_fptr = np.searchsorted(feat_chunk, np.arange(n_chunks + 1)).astype(np.int64)
        nfeat = np.diff(chunk_fptr)
        hbits = np.ceil(np.log2(np.maximum(2 * nfeat, 2))).astype(np.int64)  # ≤ 50% load
        chunk_hptr = np.concatenate(([0], np.cumsum(np.int64(1) << hbits))).astype(np.int64)
        table = np.full(chunk_hptr[-1], -1, np.int64)
        feat_id = feat_id.astype(np.int32)
        chunk_hshift = (32 - hbits).astype(np.int64)
        _fill_hash(chunk_fptr, chunk_hptr, chunk_hshift, feat_id, table)
        nchild_all = np.concatenate(nchild).astype(np.int64)
        dims = 0 if start is None else n_cols - start
        arrays = (
            chunk_base,
            node_base,
            np.concatenate(child0).astype(np.int64),
            nchild_all,
            chunk_fptr,
            feat_id,
            np.r_[first, len(key)].astype(np.int64),  # feat_eptr
            np.concatenate(children)[order],
            np.concatenate(weights)[order],
            chunk_hptr,
            chunk_hshift,
            table,
            np.concatenate(bias),
            np.ascontiguousarray(np.vstack(dense) if dense else np.zeros((int(node_base[-1]), 0), np.float32)),
            fm_base,
            np.concatenate(fm_ptr) if fm_ptr else np.zeros(0, np.int64),
            np.concatenate(fm_node) if fm_node else np.zeros(0, np.int32),
            np.concatenate(fm_w) if fm_w else np.zeros(0, np.float32),
        )
        assert arrays[13].shape[1] == dims
        width = int(nchild_all.max()) if len(nchild_all) else 0
        return cls(chain.depth, sparse_cols, start, chain.leaf_labels.astype(np.int64), width, fm_nodes, arrays)

    def save(self, folder: Path) -> None:
        """One uncompressed .npy per array plus layout.json: what `load` maps into memory. Each file is written
        atomically; export lists them all in the bundle's manifest, which it writes after this."""
        folder.mkdir(parents=True, exist_ok=True)
        for name, array in zip(ARRAY_NAMES, (*self.arrays,)):
            write_atomic(folder / f"{name}.npy", lambda fh, a=array: np.save(fh, np.ascontiguousarray(a)))
        write_atomic(folder / "leaf_labels.npy", lambda fh: np.save(fh, self.leaf_labels))
        meta = {"depth": self.depth, "n_features": self.n_features, "dense_start": self.dense_start,
                "max_width": self.max_width, "max_feature_major_nodes": self.max_feature_major_nodes}  # fmt: skip
        write_text_atomic(folder / LAYOUT_FILE, json.dumps(meta, indent=2))

    @classmethod
    def load(cls, folder: Path) -> CompiledLevels:
        """The saved layout, memory-mapped copy-on-write: processes serving one bundle share its pages (the
        kernels never write to them), loading costs no parse or copy, and arrays stay writeable as the kernels'
        compiled signatures expect. An unreadable file gives an XtagError naming it."""
        with reading(folder / LAYOUT_FILE, "the engine layout"):
            meta = json.loads((folder / LAYOUT_FILE).read_text())
            head = [meta[k] for k in ("depth", "n_features", "dense_start", "max_width", "max_feature_major_nodes")]
        arrays = tuple(_mapped(folder / f"{name}.npy") for name in ARRAY_NAMES)
        depth, n_features, dense_start, max_width, max_fm_nodes = head
        return cls(depth, n_features, dense_start, _mapped(folder / "leaf_labels.npy"), max_width, max_fm_nodes, arrays)


def _mapped(path: Path) -> np.ndarray:
    """A plain ndarray view of the file's pages (np.memmap's subclass is not what numba compiled for)."""
    with reading(path, "an engine layout array"):
        array = np.load(path, mmap_mode="c", allow_pickle=False)
    return np.asarray(array) if array.size else np.array(array)
