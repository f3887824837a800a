"""LightXML's label clusters (the two-layer PLT) and the clusters' labels the discriminator trains on (eq. 2)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from xtag.models.label_tree import ClusterChain
from xtag.training.deep.padded_candidates import pad_rows
from xtag.training.lightxml.config import LightXMLConfig
from xtag.training.tree.build import TreeConfig, build_tree, pifa_embeddings


def label_clusters(X: sp.csr_matrix, Y: sp.csr_matrix, lc: LightXMLConfig) -> ClusterChain:
    """Two-level chain root → clusters → labels (the paper's two-layer PLT).

    Up to `flat_max_labels` labels: one label per cluster (the paper's choice for small label sets).
    Above: PIFA label vectors (normalised sums of their documents' TF-IDF rows) split recursively by
    balanced 2-means until clusters hold at most C labels (so between C/2 and C, as in AttentionXML);
    only the leaf clusters are kept.
    """
    L = Y.shape[1]
    if L <= lc.flat_max_labels or lc.cluster_size == 1:
        return ClusterChain(ptrs=[np.array([0, L]), np.arange(L + 1)], leaf_labels=np.arange(L))
    tree = build_tree(pifa_embeddings(X, Y), TreeConfig(branching=2, max_leaf_size=lc.cluster_size, seed=lc.seed))
    leaves = tree.ptrs[-1]
    return ClusterChain(ptrs=[np.array([0, len(leaves) - 1]), leaves], leaf_labels=tree.leaf_labels)


def training_candidates(
    top: np.ndarray, true_clusters: list[np.ndarray], members: np.ndarray, positives: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eq. 2 in training: labels of each row's top clusters plus its true clusters (duplicates removed).

    Returns (labels, valid mask, targets), each rows × max candidates; padded entries hold label 0
    with mask 0. `members` is the cluster × size table of label ids (-1 padded).
    """
    rows = []
    for top_row, true_row in zip(top, true_clusters):
        clusters = np.unique(np.concatenate([top_row, true_row]))
        labels = members[clusters].ravel()
        rows.append(labels[labels >= 0])
    return pad_rows(rows, positives)
