"""CascadeXML's label resolutions and its layer / dropout recipe, derived from the tree and the encoder's depth."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from xtag.models.errors import XtagError
from xtag.models.label_tree import ClusterChain
from xtag.training.cascadexml.config import CascadeXMLConfig
from xtag.training.tree.build import TreeConfig, build_tree, pifa_embeddings

REFERENCE_DROPOUTS = (0.2, 0.25, 0.4, 0.5)  # the reference's four resolutions, coarse first


def resolutions(X: sp.csr_matrix, Y: sp.csr_matrix, cc: CascadeXMLConfig) -> ClusterChain:
    """The shared label tree (B-ary balanced k-means on PIFA, training/tree/build.py): each of its levels below the
    root is one resolution, the labels the last (595 debtags labels, B=16, leaves ≤ 8: 8 → 128 → 595)."""
    return build_tree(
        pifa_embeddings(X, Y), TreeConfig(branching=cc.branching, max_leaf_size=cc.max_leaf_size, seed=cc.seed)
    )


def default_layers(n_layers: int, levels: int) -> list[list[int]]:
    """The reference's rule scaled to the encoder's depth: the labels read the last layer, each coarser level
    the layer `step` below (step = 2 in a 12-layer BERT, so depth / 6), and level 0 concatenates its layer
    with the one beneath. BERT-12, four levels: cat(5, 6), 8, 10, 12 (the reference); MiniLM-L6, three
    levels: cat(3, 4), 5, 6; layers below 1 are clamped to 1 (tiny encoders)."""
    step = max(1, round(n_layers / 6))
    top = [max(1, n_layers - step * (levels - 1 - i)) for i in range(levels)]
    return [[top[0] - 1, top[0]] if top[0] > 1 else [top[0]]] + [[layer] for layer in top[1:]]


def default_dropouts(levels: int) -> list[float]:
    """The reference's 0.2/0.25/0.4/0.5 for four levels; otherwise evenly from 0.2 (coarse) to 0.5 (labels)."""
    if levels == len(REFERENCE_DROPOUTS):
        return list(REFERENCE_DROPOUTS)
    return [round(float(p), 4) for p in np.linspace(0.2, 0.5, levels)] if levels > 1 else [0.5]


def level_top_k(cc: CascadeXMLConfig, sizes: list[int]) -> list[int]:
    """The top-k of each cluster level (all levels but the labels), capped at the level's size."""
    top = cc.top_k if cc.top_k is not None else [cc.beam_size] * (len(sizes) - 1)
    if len(top) != len(sizes) - 1:
        raise XtagError(f"top_k has {len(top)} entries, the tree has {len(sizes) - 1} cluster levels")
    return [min(k, s) for k, s in zip(top, sizes)]


def per_level(values: list | None, levels: int, default: list, what: str) -> list:
    """A per-resolution setting: the default, or the configured list, which must have one entry per level."""
    if values is None:
        return default
    if len(values) != levels:
        raise XtagError(f"{what} has {len(values)} entries, the tree has {levels} resolutions")
    return list(values)
