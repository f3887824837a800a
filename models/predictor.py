"""Text in, top-k labels out: featuriser + model + label names, the object evaluation and the service hold."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.errors import XtagError
from models.features import TfidfFeaturizer
from models.inference import Predictions
from models.labels import LabelVocab
from models.xlinear import XLinearModel


@dataclass
class Predictor:
    featurizer: TfidfFeaturizer
    model: XLinearModel
    vocab: LabelVocab

    @property
    def n_labels(self) -> int:
        return len(self.vocab)

    def predict(self, texts: list[str], k: int = 10, beam_size: int | None = None) -> Predictions:
        """Top-k for a batch of texts (a single document is a batch of one: same code path)."""
        if k < 1:
            raise XtagError(f"k must be at least 1, got {k}")
        if beam_size is not None and beam_size < 1:
            raise XtagError(f"beam_size must be at least 1, got {beam_size}")
        if not texts:
            return Predictions(labels=np.empty((0, k), np.int64), scores=np.empty((0, k), np.float32))
        return self.model.predict(self.featurizer.transform(list(texts)), k=k, beam_size=beam_size)

    def named(self, preds: Predictions) -> list[list[tuple[int, str, float]]]:
        """(label id, name, score) per document, best first, padding dropped."""
        return [[(int(j), self.vocab.names[j], float(s)) for j, s in zip(row_l, row_s) if j >= 0]
                for row_l, row_s in zip(preds.labels, preds.scores)]
