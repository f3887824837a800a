"""The tree fused with the label-text stage (NGAME's fusion), torch-free.

Candidates of a document: the tree's beam top-K ∪ the label index's top-M for its embedding. The fusion
(models/label_text/fusion.py) scores each from the tree's score (0 and an "absent" flag where the tree did not
propose it), the cosine, and the label's training frequency, so a label with text but no training document can be
returned. Labels the tree knows keep their ids 0..n_tree-1; labels from the label file alone follow them.
A document whose text embeds to nothing gets the tree's answer alone (never NaN).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.special import expit
from xtag.models.errors import XtagError
from xtag.models.inference.beam_search import top_k
from xtag.models.inference.model import CostHint, Model
from xtag.models.inference.types import Predictions
from xtag.models.label_text.fusion import Fusion, candidate_features
from xtag.models.label_text.index import LabelIndex


@dataclass(frozen=True)
class TextFeatures:
    """What the fused model scores: the tree's feature rows and the texts the encoder reads."""

    X: sp.csr_matrix | Any
    texts: list[str]


class TextAndFeatures:
    """The featuriser of a fused bundle: the tree's featuriser's rows, with the texts kept for the encoder."""

    def __init__(self, inner):
        self.inner = inner
        self.tfidf, self.encodes = inner.tfidf, inner.encodes  # the Featurizer contract (models/inference/predictor.py)
        self.dim = None  # not one matrix

    def transform(self, texts: list[str]) -> TextFeatures:
        return TextFeatures(self.inner.transform(list(texts)), list(texts))


def embeds_nothing(queries: np.ndarray | sp.csr_matrix) -> np.ndarray:
    """Per query: its text embedded to nothing (a zero row: no term the encoder knows)."""
    if sp.issparse(queries):
        return np.diff(queries.tocsr().indptr) == 0
    return ~np.asarray(queries).any(axis=1)


def candidates(
    tree: Predictions, queries: np.ndarray, index: LabelIndex, m: int, fitted: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(labels n × (K+M), their fusion features n × (K+M) × F): the tree's top K, then the index's top M for each
    query that the tree did not propose (a repeated or missing one is -1). The one candidate builder of serving and
    of the fusion's fitting (training/label_text/fusion.py). With `fitted` < the index's labels (labels added after
    the fit, `added_candidates`), the index's top M is taken among the fitted labels and the added labels' top M
    follow."""
    proposed = tree.labels >= 0
    tree_scores = np.where(proposed & np.isfinite(tree.scores), tree.scores, 0.0)
    tree_labels = np.where(proposed, tree.labels, -1)
    found, sims, tree_cosine = index.search_and_cosines(queries, m, tree_labels, among=fitted)
    same = (found[:, :, None] == tree_labels[:, None, :]) & proposed[:, None, :]  # n × M × K
    repeated = same.any(axis=2)
    in_index = same.any(axis=1)  # a tree candidate the index found too: its place there is a feature
    found = np.where(repeated | (found < 0), -1, found)
    labels = np.concatenate([tree_labels, found], axis=1)
    cosine = np.concatenate([tree_cosine, np.where(found >= 0, sims, 0.0)], axis=1)
    scores = np.concatenate([tree_scores, np.zeros(found.shape, np.float32)], axis=1)
    places = np.broadcast_to(np.arange(tree_labels.shape[1]), tree_labels.shape)
    tree_rank = np.concatenate([np.where(proposed, places, -1), np.full(found.shape, -1)], axis=1)
    index_places = np.broadcast_to(np.arange(found.shape[1]), found.shape)
    index_rank = np.concatenate(
        [np.where(in_index, same.argmax(axis=1), -1), np.where(found >= 0, index_places, -1)], axis=1
    )
    frequency = index.frequencies[np.maximum(labels, 0)]
    features = candidate_features(scores, tree_rank, index_rank, cosine, frequency)
    if fitted is None or fitted >= index.n_labels:
        return labels, features
    fitted_columns = (scores, tree_rank, index_rank, cosine, frequency)
    return added_candidates(queries, index, m, fitted, labels, features, fitted_columns, sims)


def added_candidates(
    queries, index: LabelIndex, m: int, fitted: int, labels, features, fitted_columns: tuple, found_sims: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The fitted labels' candidates (`labels`, `features`, and `fitted_columns`: the raw tree scores, tree and
    index places, cosines and frequencies `candidate_features` read), then the top M of the labels added after the
    fit (ids fitted..); `found_sims`: the cosines of the index's list of fitted labels.

    Why a list of their own: the fusion reads a candidate's place in the index's list and its gap to the document's
    best cosine, so added labels taking places in that list would change the scores of the labels the model had
    (`xtag update --labels` promises they keep them). An added label is featured as if it had been found by the same
    search: it is a candidate when its cosine beats the fitted list's last, its place is the count of that list's
    cosines above its own, its gap is to the best of both lists.
    Its cosines are computed for every added label (cost: documents × added labels)."""
    n = labels.shape[0]
    added = np.broadcast_to(np.arange(fitted, index.n_labels), (n, index.n_labels - fitted))
    sims = index.cosines(queries, added)
    best = np.argsort(-sims, axis=1, kind="stable")[:, :m]  # ties in id order, exactly
    new_sims = np.take_along_axis(sims, best, axis=1).astype(np.float32)
    # as found by the same search: only what would have beaten the fitted list's last (ties go to the lower id)
    new_ids = np.where(new_sims > found_sims[:, -1:], np.take_along_axis(added, best, axis=1), -1)
    place = (found_sims[:, None, :] > new_sims[:, :, None]).sum(axis=2)  # -inf (no label there) never counts
    added_columns = (
        np.zeros(new_ids.shape, np.float32),  # no tree score
        np.full(new_ids.shape, -1),  # not in the tree's list
        place,
        new_sims,
        index.frequencies[np.maximum(new_ids, 0)],
    )
    both = [np.concatenate([old, new], axis=1) for old, new in zip(fitted_columns, added_columns)]
    tail = candidate_features(*both)[:, labels.shape[1] :]
    return np.concatenate([labels, new_ids], axis=1), np.concatenate([features, tail], axis=1)


class FusedModel(Model):
    """The tree's model (an XR-Linear model) + the encoder, the label index and the fusion."""

    def __init__(self, tree: Model, encoder, index: LabelIndex, fusion: Fusion):
        if index.n_labels < tree.n_labels:
            raise XtagError(f"label index holds {index.n_labels} labels, the tree {tree.n_labels}")
        if encoder.dim != index.info.dim:
            raise XtagError(f"label encoder gives {encoder.dim} dimensions, the label index holds {index.info.dim}")
        self.tree, self.encoder, self.index, self.fusion = tree, encoder, index, fusion

    @property
    def config(self):
        """The tree's config (its beam size is the bundle's)."""
        return self.tree.config

    @property
    def n_labels(self) -> int:
        return self.index.n_labels

    def cost_hint(self) -> CostHint:
        """An encoder pass and an index search per document on top of the tree's beam search."""
        return CostHint("encoder", level_nodes=self.tree.cost_hint().level_nodes)

    def predict(self, features: TextFeatures, k: int = 10, beam_size: int | None = None) -> Predictions:
        width = min(max(self.fusion.tree_candidates, k), self.tree.n_labels)
        tree = self.tree.predict(features.X, k=width, beam_size=beam_size)
        queries = self.encoder.encode_documents(features.texts)
        labels, feats = candidates(
            tree, queries, self.index, self.fusion.index_candidates, fitted=self.fusion.fitted_labels
        )
        scores = np.where(labels >= 0, expit(self.fusion.logits(feats)), -np.inf).astype(np.float32)
        ids, best = self.fusion.top(scores, labels, self.index.frequencies[np.maximum(labels, 0)] == 0, k)
        silent = embeds_nothing(queries)  # the tree alone
        if silent.any():
            alone_ids, alone = top_k(tree.scores[silent], tree.labels[silent], k)
            ids[silent], best[silent] = alone_ids, alone
        return Predictions(labels=ids, scores=best)

    def related(self, label: int, k: int) -> Predictions:
        """The k labels nearest to `label` by text (itself left out); an empty answer for a label with no text."""
        if not 0 <= label < self.n_labels:
            raise XtagError(f"label {label} is not one of the model's {self.n_labels}")
        query = self.index.vectors(np.array([label]))
        if embeds_nothing(query)[0]:
            return Predictions(np.full((1, 0), -1, np.int64), np.zeros((1, 0), np.float32))
        ids, sims = self.index.search(query, k + 1)
        keep = (ids[0] != label) & (ids[0] >= 0)
        return Predictions(ids[:, keep][:, :k], sims[:, keep][:, :k])
