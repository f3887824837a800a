"""The fusion's fit: boosted trees (or a logistic regression) over the candidates of documents that the scoring tree
did not train on.

Why held out: on its own training documents the tree's scores are near their ceiling for every true label, so a
fusion fitted there learns to trust the tree and never the cosine. A second tree trained without a held-out
fraction scores those documents as it would unseen ones, and the labels only they carry have no training document
in it, as a test document's new labels have none in the served tree.
"""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp
from xtag.models.inference.types import Predictions
from xtag.models.label_text.fusion import FEATURES, LINEAR_FEATURES, BoostedTrees, Fusion
from xtag.models.label_text.index import LabelIndex
from xtag.models.label_text.model import candidates, embeds_nothing

BOOSTED_TREES, BOOSTED_LEAVES = 100, 15
# A true label with no training document weighs this many candidates in the boosted fit: few held-out positives are
# such labels, and the fit otherwise ranks them all below the tree's (debdeps: test-only recall@10 +1.1 points,
# P@1 -0.06; bench/experiments/fusion_features.py).
NEW_POSITIVE_WEIGHT = 3.0
# Fewer true held-out candidates than this and the boosted trees cannot split (sklearn's leaves hold at least 20
# samples): every candidate would get one score and the tree's order would win by the tie, so a label with text and no
# training document could never come first. The logistic regression still learns a weight per feature from a few
# dozen positives (a small corpus; debdeps has thousands).
MIN_BOOSTED_POSITIVES = 200


def fit_fusion(
    tree: Predictions,
    queries: np.ndarray | sp.csr_matrix,
    own: np.ndarray | None,
    index: LabelIndex,
    Y: sp.csr_matrix,
    index_candidates: int,
    log,
    kind: str = "boosted-trees",
) -> Fusion:
    """`tree`: the held-out tree's top K for the held-out documents; `queries`: their embeddings; `own`: per document,
    the label that is the document itself (-1: none), left out of the fit: a document that is a label matches its own
    text best and never carries itself (most debdeps documents are packages that others depend on), which would
    teach the fusion to distrust a high cosine; `index`: the label embeddings with the held-out tree's training
    frequencies; `Y`: their true labels (the tree's columns); `kind`: "boosted-trees" or "logistic"."""
    start = time.perf_counter()
    labels, feats = candidates(tree, queries, index, index_candidates)
    Y = Y.tocsr()
    truth = np.zeros(labels.shape, bool)
    for i in range(labels.shape[0]):
        true = Y.indices[Y.indptr[i] : Y.indptr[i + 1]]
        truth[i] = np.isin(labels[i], true) & (labels[i] >= 0)
    keep = (labels >= 0) & ~embeds_nothing(queries)[:, None]
    if own is not None:
        keep &= labels != own[:, None]  # documents that embed to nothing are the tree's alone
    X, y = feats[keep], truth[keep]
    widths = {
        "tree_candidates": tree.labels.shape[1],
        "index_candidates": index_candidates,
        "heldout_documents": int(labels.shape[0]),
    }
    if y.all() or not y.any():  # one class only: nothing to learn from; trust the tree's score
        weights = [1.0] + [0.0] * (len(LINEAR_FEATURES) - 1)
        fusion = Fusion(features=LINEAR_FEATURES, weights=weights, intercept=0.0, **widths)
    elif kind == "logistic" or y.sum() < MIN_BOOSTED_POSITIVES:
        fusion = _logistic(X, y, widths)
    else:
        fusion = _boosted(X, y, widths)
    log(
        {
            "event": "label_fusion",
            "kind": "logistic" if fusion.trees is None else "boosted-trees",
            "candidates": int(keep.sum()),
            "positives": int(y.sum()),
            **(
                {}
                if fusion.weights is None
                else {"weights": dict(zip(fusion.features, np.round(fusion.weights, 4).tolist()))}
            ),
            "seconds": round(time.perf_counter() - start, 3),
        }
    )
    return fusion


def _logistic(X: np.ndarray, y: np.ndarray, widths: dict) -> Fusion:
    """The first bundles' fusion: a logistic regression over their six features."""
    from sklearn.linear_model import LogisticRegression

    columns = [FEATURES.index(f) for f in LINEAR_FEATURES]
    fit = LogisticRegression(C=1.0, max_iter=1000).fit(X[:, columns], y)
    weights = [float(w) for w in fit.coef_[0]]
    return Fusion(features=LINEAR_FEATURES, weights=weights, intercept=float(fit.intercept_[0]), **widths)


def _boosted(X: np.ndarray, y: np.ndarray, widths: dict) -> Fusion:
    """sklearn's HistGradientBoosting over every feature, its trees copied out into the fusion's JSON (never a pickle);
    100 trees of 15 leaves measured as good as 200 of 31 on debdeps (bench/experiments/fusion_features.py) and walk
    in half the steps."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    fit = HistGradientBoostingClassifier(
        max_iter=BOOSTED_TREES, learning_rate=0.1, max_leaf_nodes=BOOSTED_LEAVES, early_stopping=False, random_state=0
    )
    new = X[:, FEATURES.index("no_documents")] > 0
    fit.fit(X, y, sample_weight=np.where(y & new, NEW_POSITIVE_WEIGHT, 1.0))
    roots, feature, threshold, left, right, value, depth = [], [], [], [], [], [], 0
    for (predictor,) in fit._predictors:  # sklearn's fitted trees: one structured array of nodes each
        nodes, offset = predictor.nodes, len(feature)
        roots.append(offset)
        leaf = nodes["is_leaf"].astype(bool)
        feature += np.where(leaf, 0, nodes["feature_idx"]).astype(int).tolist()
        threshold += np.where(leaf, 0.0, np.clip(nodes["num_threshold"], -3e38, 3e38)).tolist()
        left += np.where(leaf, -1, nodes["left"].astype(np.int64) + offset).tolist()
        right += np.where(leaf, -1, nodes["right"].astype(np.int64) + offset).tolist()
        value += np.where(leaf, nodes["value"], 0.0).tolist()
        depth = max(depth, int(nodes["depth"].max()))
    trees = BoostedTrees(
        roots=roots, feature=feature, threshold=threshold, left=left, right=right, value=value, depth=depth
    )
    intercept = float(np.ravel(fit._baseline_prediction)[0])
    return Fusion(features=FEATURES, trees=trees, intercept=intercept, **widths)
