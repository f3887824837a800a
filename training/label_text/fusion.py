"""The fusion's fit: a logistic regression over the candidates of documents that the scoring tree did not train on.

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
from xtag.models.label_text.fusion import FEATURES, Fusion
from xtag.models.label_text.index import LabelIndex
from xtag.models.label_text.model import candidates, embeds_nothing


def fit_fusion(
    tree: Predictions,
    queries: np.ndarray | sp.csr_matrix,
    own: np.ndarray | None,
    index: LabelIndex,
    Y: sp.csr_matrix,
    index_candidates: int,
    log,
) -> Fusion:
    """`tree`: the held-out tree's top K for the held-out documents; `queries`: their embeddings; `own`: per document,
    the label that is the document itself (-1: none), left out of the fit: a document that is a label matches its own
    text best and never carries itself (most debdeps documents are packages that others depend on), which would
    teach the fusion to distrust a high cosine; `index`: the label embeddings with the held-out tree's training
    frequencies; `Y`: their true labels (the tree's columns)."""
    from sklearn.linear_model import LogisticRegression

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
    if y.all() or not y.any():  # one class only: nothing to learn from; trust the tree's score
        weights, intercept = [1.0] + [0.0] * (len(FEATURES) - 1), 0.0
    else:
        fit = LogisticRegression(C=1.0, max_iter=1000).fit(X, y)
        weights, intercept = [float(w) for w in fit.coef_[0]], float(fit.intercept_[0])
    fusion = Fusion(
        weights=weights,
        intercept=intercept,
        tree_candidates=tree.labels.shape[1],
        index_candidates=index_candidates,
        heldout_documents=int(labels.shape[0]),
    )
    log(
        {
            "event": "label_fusion",
            "candidates": int(keep.sum()),
            "positives": int(y.sum()),
            "weights": dict(zip(FEATURES, np.round(weights, 4).tolist())),
            "seconds": round(time.perf_counter() - start, 3),
        }
    )
    return fusion
