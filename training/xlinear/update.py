"""XR-Linear's `xtag update`: grow the run's tree by the new labels and retrain only the rankers that changed.

`update_rankers` is the ranker part of every family whose rankers are XR-Linear's (XR-Transformer's
update hands it Φ_cat instead of the TF-IDF). The tree grows by training/tree/grow.py's rule; each
level's retrained nodes are fitted by the same `train_level` as a full run, on the combined corpus,
as one sub-level of just those nodes under their parents (so their data, negatives and solver
settings are a full run's), and every other node's ranker row is copied from the old run unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp
from xtag.models.errors import XtagError
from xtag.models.families import RunResult, UpdateInputs, UpdatePlacement
from xtag.models.inference.types import RankerLevel
from xtag.models.xlinear.model import XLinearModel
from xtag.training.tree.build import pifa_embeddings
from xtag.training.tree.graft import gate_positive_weights, graft_subtree
from xtag.training.tree.grow import grow_tree
from xtag.training.xlinear.train import XLinearResult, _as_float_csr, _parent_mask, train_level


def _retrain_level(
    X, Yt, mask, chain, t: int, nodes: np.ndarray, config, progress: bool, pos_weight: np.ndarray | None = None
) -> RankerLevel:
    """The rankers of `nodes` (sorted node ids of level t) trained as a level of their own under their parents."""
    parents = chain.parents(t)[nodes]
    sub_parents, counts = np.unique(parents, return_counts=True)  # nodes sorted: each parent's are contiguous
    ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    targets = Yt[:, nodes].tocsr()
    desc = f"level {t} (update)"
    return train_level(X, targets, mask[:, sub_parents], ptr, config, desc, progress, pos_weight=pos_weight)


def _assemble(old: RankerLevel, fresh: RankerLevel | None, sources: np.ndarray, retrain: np.ndarray) -> RankerLevel:
    """The new level's rows: a retrained node's from `fresh` (in node order), every other one copied from `old`."""
    if fresh is None:
        return RankerLevel(W=old.W[sources].tocsr(), bias=old.bias[sources].copy())
    pick = np.where(retrain, old.W.shape[0] + np.cumsum(retrain) - 1, sources)
    W = sp.vstack([old.W, fresh.W.astype(old.W.dtype)], format="csr")[pick]
    return RankerLevel(W=W.tocsr(), bias=np.concatenate([old.bias, fresh.bias.astype(old.bias.dtype)])[pick])


def update_rankers(
    old: XLinearModel,
    X: sp.csr_matrix,
    Y: sp.csr_matrix,
    n_old: int,
    config,
    progress: bool = True,
    log: Callable[[dict], None] = lambda event: None,
    clusters: UpdatePlacement = "new",
) -> tuple[XLinearModel, dict]:
    """The old run's rankers grown by labels n_old.. of Y: any feature matrix X the rankers were trained on (XR-Linear's
    TF-IDF, XR-Transformer's Φ_cat) of the combined corpus; returns the new model and what was done."""
    if config.missing_labels.weighting != "none":
        raise XtagError("xtag update: runs trained with a missing-label weighting are not supported yet")
    if old.config.n_features != X.shape[1]:
        raise XtagError(f"xtag update: the run's rankers expect {old.config.n_features} features, got {X.shape[1]}")
    xl = config.xlinear
    start = time.perf_counter()
    X = _as_float_csr(X.astype(np.float32, copy=False))
    if clusters == "new":  # PIFA of the new labels alone: the old ones' are not needed
        growth = graft_subtree(
            old.chain,
            pifa_embeddings(X, Y, xl.tree.pifa_weighting, np.arange(n_old, Y.shape[1])),
            n_old,
            xl.tree,
            xl.n_jobs,
        )
    else:
        pifa = pifa_embeddings(X, Y, xl.tree.pifa_weighting)
        growth = grow_tree(old.chain, pifa, n_old, xl.tree.max_leaf_size, xl.tree.seed, clusters == "refit")
    chain = growth.chain
    log({"event": "tree", "what": "grown", "seconds": round(time.perf_counter() - start, 3), **growth.facts})
    levels: list[RankerLevel] = []
    counts = []
    for t in range(1, chain.depth + 1):
        start = time.perf_counter()
        sources, retrain = growth.sources[t - 1], growth.retrain[t - 1]
        nodes = np.flatnonzero(retrain)
        fresh, facts = None, {}
        if len(nodes):
            Yt = chain.level_targets(Y, t)
            mask = _parent_mask(X, chain.level_targets(Y, t - 1) if t > 1 else None, levels, chain, t, xl)
            weights = None
            if clusters == "new" and t == 1 and chain.depth > 1:  # the new subtree's top clusters: its gates
                weights = gate_positive_weights(Yt[:, nodes])
                facts = {"gate_positive_weights": np.round(weights, 3).tolist()}
            fresh = _retrain_level(X, Yt, mask, chain, t, nodes, xl, progress, weights)
        levels.append(_assemble(old.levels[t - 1], fresh, sources, retrain))
        counts.append({"level": t, "nodes": len(sources), "retrained": len(nodes), **facts})
        log({"event": "level", **counts[-1], "seconds": round(time.perf_counter() - start, 3)})
    return XLinearModel(chain, levels, old.config), {**growth.facts, "levels": counts}


FeatureStep = Callable[[UpdateInputs, Any, bool, Callable[[dict], None]], tuple[sp.csr_matrix, dict]]


def ranker_update(features: FeatureStep, result: Callable[[XLinearModel, UpdateInputs], RunResult]):
    """The `update` entry (models/families.py) of a family whose rankers are XR-Linear's, one for them all:
    `features(data, config, progress, log)` gives the matrix the rankers see for the combined corpus (and the facts
    of making it), `update_rankers` grows the run's rankers on it, `result` wraps the new model for saving."""

    def update(
        data: UpdateInputs,
        config,
        progress: bool = True,
        log: Callable[[dict], None] = lambda event: None,
        clusters: UpdatePlacement = "new",
    ) -> tuple[RunResult, dict]:
        X, facts = features(data, config, progress, log)
        old = XLinearModel.load(data.run / "model")
        model, grown = update_rankers(old, X, data.Y, data.n_old, config, progress, log, clusters)
        return result(model, data), {**facts, **grown}

    return update


def tfidf_features(
    data: UpdateInputs, config, progress: bool, log: Callable[[dict], None]
) -> tuple[sp.csr_matrix, dict]:
    """XR-Linear's rankers see the run's TF-IDF, so the combined corpus's goes to `update_rankers` as it is."""
    if config.dense is not None:
        raise XtagError(
            "xtag update: runs with a `dense` block are not supported yet (the static encoder is not refit)"
        )
    return data.X, {}


update = ranker_update(tfidf_features, lambda model, data: XLinearResult(model))
