"""A saved engine layout checked against the tree and the rankers' configuration before any kernel reads it.

The kernels (kernels.py, scoring.py) index with the layout's arrays unchecked: numba does no bounds checks,
so a wrong value reads (or writes) outside an array. A layout that passes `check_layout` keeps every index
the kernels dereference in bounds:
- the arrays the tree determines (chunk_base, node_base, chunk_child0, chunk_nchild, leaf_labels) equal it,
  and the sizes of the per-thread buffers (max_width, max_feature_major_nodes) are what those need;
- the pointer arrays (chunk_fptr, feat_eptr, chunk_hptr, fm_ptr) run from 0 to the length of what they
  point into without decreasing;
- feature ids lie below the sparse column count, a chunk's entries name its own children, a feature-major
  level's entries its own nodes, and the node arrays (bias, dense) cover every node;
- every hash table is a power of two with the shift that keeps probes inside it, holds at least one empty
  slot (a probe stops only there or on its feature: a full table would loop forever), and each filled slot
  names a feature of its chunk (the index the probe dereferences next).
Run once per load, vectorised, the big arrays (entries, tables) a block at a time; a failure names the file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from xtag.models.engine.layout import ARRAY_NAMES, LAYOUT_FILE, CompiledLevels
from xtag.models.errors import XtagError
from xtag.models.files import index_bounds
from xtag.models.label_tree import ClusterChain

# What CompiledLevels.build writes, and the kernels are compiled for: (dtype, dimensions) per array.
SHAPES = dict(
    zip(ARRAY_NAMES, [("int64", 1)] * 5 + [("int32", 1), ("int64", 1), ("int32", 1), ("float32", 1)]
        + [("int64", 1)] * 3 + [("float32", 1), ("float32", 2), ("int64", 1), ("int64", 1), ("int32", 1), ("float32", 1)])
)  # fmt: skip


def check_layout(folder: Path, compiled: CompiledLevels, chain: ClusterChain, n_features: int, dense: int) -> None:
    """Raise an XtagError naming the file at fault unless `compiled` (loaded from `folder`) is the layout of
    `chain` with rankers over `n_features` columns, the last `dense` of them a dense tail."""
    A = dict(zip(ARRAY_NAMES, compiled.arrays))

    def name(key: str) -> str:
        return str(folder / f"{key}.npy")

    for key, (dtype, ndim) in SHAPES.items():
        a = A[key]
        if a.dtype != np.dtype(dtype) or a.ndim != ndim:
            raise index_bounds.fail(name(key), f"{a.ndim}-d {a.dtype}, expected {ndim}-d {dtype}")
    _check_meta(folder, compiled)
    sizes = [1] + [chain.level_size(t) for t in range(1, chain.depth + 1)]  # level 0: the root
    depth, n_chunks, n_nodes = chain.depth, sum(sizes[:-1]), sum(sizes[1:])
    if compiled.depth != depth:
        raise XtagError(f"{folder / LAYOUT_FILE}: depth {compiled.depth}, the tree has {depth} levels")
    tree = "the label tree (tree/chain.npz)"
    index_bounds.equal(name("chunk_base"), A["chunk_base"], np.r_[0, np.cumsum([0, *sizes[:-1]])], tree)
    index_bounds.equal(name("node_base"), A["node_base"], np.r_[0, np.cumsum([0, *sizes[1:]])], tree)
    index_bounds.equal(name("chunk_child0"), A["chunk_child0"], np.concatenate([p[:-1] for p in chain.ptrs]), tree)
    nchild = A["chunk_nchild"]
    index_bounds.equal(name("chunk_nchild"), nchild, np.concatenate([np.diff(p) for p in chain.ptrs]), tree)
    index_bounds.equal(str(folder / "leaf_labels.npy"), compiled.leaf_labels, chain.leaf_labels, tree)
    if compiled.max_width != (int(nchild.max()) if n_chunks else 0):
        raise XtagError(f"{folder / LAYOUT_FILE}: max_width {compiled.max_width}, the tree's is {int(nchild.max())}")

    sparse = n_features - dense
    if compiled.n_features != sparse or compiled.dense_start != (sparse if dense else None):
        raise XtagError(
            f"{folder / LAYOUT_FILE}: {compiled.n_features} sparse columns (dense tail from {compiled.dense_start}); "
            f"the rankers have {sparse} (dense tail from {sparse if dense else None})"
        )
    if A["bias"].shape != (n_nodes,):
        raise index_bounds.fail(name("bias"), f"shape {A['bias'].shape}, the tree has {n_nodes} nodes")
    if A["dense"].shape != (n_nodes, dense):
        raise index_bounds.fail(name("dense"), f"shape {A['dense'].shape}, expected ({n_nodes}, {dense})")

    # chunk → its features → their (child, weight) entries
    fptr, feat_id, eptr, ent_child = A["chunk_fptr"], A["feat_id"], A["feat_eptr"], A["ent_child"]
    index_bounds.pointer(name("chunk_fptr"), fptr, len(feat_id), n_chunks + 1)
    index_bounds.in_range(name("feat_id"), feat_id, 0, sparse, "the sparse feature columns")
    index_bounds.pointer(name("feat_eptr"), eptr, len(ent_child), len(feat_id) + 1)
    if len(A["ent_w"]) != len(ent_child):
        raise index_bounds.fail(name("ent_w"), f"{len(A['ent_w'])} weights for {len(ent_child)} entries")
    chunk_entries = eptr[fptr]  # entries of chunk g: chunk_entries[g] .. chunk_entries[g + 1]
    for g0, g1 in index_bounds.segment_blocks(chunk_entries):
        child = ent_child[chunk_entries[g0] : chunk_entries[g1]]
        bad = (child < 0) | (child >= nchild[index_bounds.segment_ids(chunk_entries, g0, g1)])
        if bad.any():
            raise index_bounds.fail(
                name("ent_child"), f"entry {int(chunk_entries[g0] + np.argmax(bad))} names no child of its chunk"
            )
    _check_tables(A, name, n_chunks)
    _check_feature_major(A, name, compiled, sizes, sparse)


def _check_meta(folder: Path, compiled: CompiledLevels) -> None:
    """layout.json's numbers are counts (the workspace sizes come from them), not whatever JSON allows."""
    counts = (compiled.depth, compiled.n_features, compiled.max_width, compiled.max_feature_major_nodes)
    start = compiled.dense_start
    if not all(type(v) is int and v >= 0 for v in counts) or not (start is None or (type(start) is int and start >= 0)):
        raise XtagError(f"{folder / LAYOUT_FILE}: depth, n_features, max_width, max_feature_major_nodes and "
                        f"dense_start must be non-negative integers (dense_start may be null)")  # fmt: skip


def _check_tables(A: dict, name, n_chunks: int) -> None:
    """Per chunk: a power-of-two open-addressing table, its shift, an empty slot, filled slots naming its features."""
    hptr, shift, table, fptr, feat_id = A["chunk_hptr"], A["chunk_hshift"], A["table"], A["chunk_fptr"], A["feat_id"]
    index_bounds.pointer(name("chunk_hptr"), hptr, len(table), n_chunks + 1)
    size = np.diff(hptr)
    if n_chunks and (bool((size < 1).any()) or bool((size & (size - 1)).any()) or int(size.max()) > 1 << 32):
        raise index_bounds.fail(name("chunk_hptr"), "a chunk's hash table size is not a power of two from 1 to 2^32")
    if len(shift) != n_chunks or (n_chunks and not np.array_equal(shift, 32 - np.log2(size).astype(np.int64))):
        raise index_bounds.fail(
            name("chunk_hshift"), "shifts must be 32 - log2(table size): probes would leave the table"
        )
    nfeat = np.diff(fptr)
    for g0, g1 in index_bounds.segment_blocks(hptr):
        slots = table[hptr[g0] : hptr[g1]]
        chunk = index_bounds.segment_ids(hptr, g0, g1)
        index_bounds.in_range(name("table"), slots, -1, 1 << 63, "-1 marks an empty slot")
        if bool((np.bincount(chunk[slots < 0] - g0, minlength=g1 - g0) == 0).any()):
            raise index_bounds.fail(name("table"), "a chunk's hash table has no empty slot: a probe would never stop")
        full = slots >= 0
        pos, key, chunk = slots[full] & 0xFFFFFFFF, slots[full] >> 32, chunk[full]
        if bool((pos >= nfeat[chunk]).any()):
            raise index_bounds.fail(name("table"), "a slot names a feature position outside its chunk")
        if not np.array_equal(feat_id[fptr[chunk] + pos], key):
            raise index_bounds.fail(name("table"), "a slot's feature id is not the feature at the position it names")


def _check_feature_major(A: dict, name, compiled: CompiledLevels, sizes: list[int], sparse: int) -> None:
    """The feature-major copies: each level's row pointers inside fm_ptr, its entries naming its own nodes."""
    base, ptr, node = A["fm_base"], A["fm_ptr"], A["fm_node"]
    depth = len(sizes) - 1
    if len(base) != depth + 2:
        raise index_bounds.fail(name("fm_base"), f"{len(base)} entries, expected {depth + 2}")
    if len(A["fm_w"]) != len(node):
        raise index_bounds.fail(name("fm_w"), f"{len(A['fm_w'])} weights for {len(node)} entries")
    if len(ptr):
        index_bounds.pointer(name("fm_ptr"), ptr, len(node))
    elif len(node):
        raise index_bounds.fail(name("fm_ptr"), f"empty, with {len(node)} feature-major entries")
    index_bounds.in_range(name("fm_base"), base, -1, len(ptr), "-1 marks a level stored by chunks only")
    levels = [t for t in range(1, depth + 1) if base[t] >= 0]
    widest = max((sizes[t] for t in levels), default=0)
    if compiled.max_feature_major_nodes != widest:
        raise index_bounds.fail(name("fm_base"), f"feature-major levels of up to {widest} nodes, "
                          f"layout.json says {compiled.max_feature_major_nodes}")  # fmt: skip
    for t in levels:
        b = int(base[t])
        if b + sparse + 1 > len(ptr):
            raise index_bounds.fail(name("fm_base"), f"level {t}'s rows start at {b}, past fm_ptr's {len(ptr)} entries")
        index_bounds.in_range(name("fm_node"), node[ptr[b] : ptr[b + sparse]], 0, sizes[t], f"level {t}'s nodes")
