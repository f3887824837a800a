"""Text in, top-k labels out: featuriser + model + label names, the object evaluation and the service hold."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import scipy.sparse as sp
from xtag.models.errors import XtagError
from xtag.models.inference.calibration import Calibration
from xtag.models.inference.label_filter import LabelFilter, predict_filtered
from xtag.models.inference.model import CostHint, Model
from xtag.models.inference.types import Predictions
from xtag.models.label_texts import LabelTexts
from xtag.models.labels import LabelVocab


class Featurizer(Protocol):
    """Texts → what the model scores: the rankers' feature matrix (TF-IDF, or Φ_cat with an encoder), or
    LightXML's ONNX outputs (models/lightxml.LightXMLOutputs). It declares what it is made of, for those who
    must know: explanations need a TF-IDF block (models/explain/linear.py), the cost model an encoder's pass."""

    tfidf: Any  # its TF-IDF block (models/features/tfidf.py TfidfFeaturizer), or None
    encodes: bool  # it runs a dense encoder (ONNX or static token embeddings) over every text
    dim: int | None  # the columns of the feature matrix it gives, or None when it gives no matrix

    def transform(self, texts: list[str]) -> sp.csr_matrix | Any: ...


@dataclass
class Predictor:
    featurizer: Featurizer
    model: Model
    vocab: LabelVocab
    calibration: Calibration | None = None  # the bundle's calibration.json: scores become probabilities
    label_texts: LabelTexts | None = None  # the bundle's label_texts.jsonl (what each label says), when it has one

    @property
    def n_labels(self) -> int:
        return len(self.vocab)

    @property
    def scores_labels(self) -> bool:
        """Whether a small `include` is scored label by label (Model.score_labels; never through a re-ranker)."""
        return self.model.scores_labels and not self.model.reranks

    def cost_hint(self) -> CostHint:
        """The model's (models/inference/model.py), but a linear model over a transformer's features
        (XR-Transformer's concatenated featuriser) also pays the encoder per document."""
        hint = self.model.cost_hint()
        if hint.family == "linear" and self.featurizer.encodes:
            return CostHint("encoder", level_nodes=hint.level_nodes)
        return hint

    def predict(
        self,
        texts: list[str],
        k: int = 10,
        beam_size: int | None = None,
        calibrated: bool = True,
        rerank: bool = True,
        filters: Sequence[LabelFilter | None] | None = None,
    ) -> Predictions:
        """Top-k for a batch of texts (a single document is a batch of one: same code path).

        Scores are calibrated probabilities when the bundle has a calibration (and `calibrated`);
        the ranking is the model's either way, since the calibration map is non-decreasing.
        `rerank=False` makes a re-ranking bundle (LaMP) answer with its first stage alone, exactly as the first
        stage's own bundle does (its calibration, not this bundle's); other bundles ignore it.
        `filters`, one per text (None: that text is not filtered): the top k among the labels each allows
        (models/inference/label_filter.py says what is exact).
        """
        if k < 1:
            raise XtagError(f"k must be at least 1, got {k}")
        if beam_size is not None and beam_size < 1:
            raise XtagError(f"beam_size must be at least 1, got {beam_size}")
        if not texts:
            return Predictions(labels=np.empty((0, k), np.int64), scores=np.empty((0, k), np.float32))
        texts = list(texts)
        if filters is None or all(f is None for f in filters):
            return self._scored(self.featurizer.transform(texts), k, beam_size, calibrated, rerank)
        if len(filters) != len(texts):
            raise XtagError(f"{len(filters)} label filters for {len(texts)} texts")

        def search(docs: list[int], kk: int, beam: int) -> Predictions:
            return self._scored(self.featurizer.transform([texts[d] for d in docs]), kk, beam, calibrated, rerank)

        def exact(docs: list[int], labels: list[np.ndarray]) -> Predictions:
            features = self.featurizer.transform([texts[d] for d in docs])
            return self._shown(features, self.model.score_labels(features, labels), calibrated, rerank)

        beam = beam_size or int(self.model.config.beam_size)
        return predict_filtered(filters, k, beam, self.n_labels, search, exact if self.scores_labels else None)

    def _scored(self, features, k: int, beam_size: int | None, calibrated: bool, rerank: bool) -> Predictions:
        """The model's top-k for featurised texts, as shown (readable, calibrated)."""
        if self.model.reranks:
            preds = self.model.predict(features, k=k, beam_size=beam_size, rerank=rerank)
        else:
            preds = self.model.predict(features, k=k, beam_size=beam_size)
            rerank = True  # a bundle that does not re-rank: its calibration applies either way
        return self._shown(features, preds, calibrated, rerank)

    def _shown(self, features, preds: Predictions, calibrated: bool, rerank: bool) -> Predictions:
        preds = self.model.readable(features, preds)  # the shown scores (XR-Linear: models/xlinear/readable.py)
        if calibrated and rerank and self.calibration is not None:
            preds = Predictions(labels=preds.labels, scores=self.calibration.apply(preds.scores))
        return preds

    def named(self, preds: Predictions) -> list[list[tuple[int, str, float]]]:
        """(label id, name, score) per document, best first, padding dropped."""
        return [
            [(int(j), self.vocab.names[j], float(s)) for j, s in zip(row_l, row_s) if j >= 0]
            for row_l, row_s in zip(preds.labels, preds.scores)
        ]
