"""The cascade's shortlisting, in numpy: top-k nodes of a level and their children, the next level's candidates.

Prediction (models/cascadexml/model.py) and training (training/cascadexml/) use these same functions,
so a level is trained on exactly the candidate rule it is served with (plus, in training, the true
parents: teacher forcing).
"""

from __future__ import annotations

import numpy as np
from xtag.models.label_tree import ClusterChain


def child_tables(chain: ClusterChain) -> list[np.ndarray]:
    """Per resolution r (chain level r + 1) except the labels: node × max-branching table of the next
    resolution's nodes, -1 padded, with an extra all -1 row so that a padded node (-1) expands to nothing."""
    tables = []
    for t in range(2, chain.depth + 1):
        table = chain.child_table(t)
        tables.append(np.vstack([table, np.full((1, table.shape[1]), -1, dtype=np.int64)]))
    return tables


def top_nodes(logits: np.ndarray, nodes: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's k best scored nodes (n × k, -1 where a row has fewer valid nodes) and their logits.

    `nodes` holds the node ids the columns of `logits` score (-1: padding, never picked)."""
    masked = np.where(nodes >= 0, logits, -np.inf)
    k = min(k, masked.shape[1])
    pos = np.argpartition(-masked, k - 1, axis=1)[:, :k] if k < masked.shape[1] else np.argsort(-masked, axis=1)
    rows = np.arange(len(nodes))[:, None]
    picked, picked_logits = nodes[rows, pos], masked[rows, pos]
    return np.where(np.isfinite(picked_logits), picked, -1), picked_logits


def expand(parents: np.ndarray, table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The children of each row's parents (n × parents·B, -1 padded) and, per child, its parent's column."""
    children = table[parents]  # parent -1 reads the table's all -1 last row
    owner = np.broadcast_to(np.arange(parents.shape[1])[None, :, None], children.shape)
    return children.reshape(len(parents), -1), owner.reshape(len(parents), -1)


def with_true_parents(parents: np.ndarray, true_parents: list[np.ndarray]) -> list[np.ndarray]:
    """Teacher forcing: each row's shortlisted parents plus its true ones (the nodes above its labels), unique."""
    return [np.union1d(p[p >= 0], t).astype(np.int64) for p, t in zip(parents, true_parents)]
