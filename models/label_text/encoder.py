"""The label-text stage's encoder, interim: TF-IDF over documents and label texts, projected to a dense space.

Stands in for the dual encoder (issue 49's encoder part) with the same shape: `dim`, `encode_documents`,
`encode_labels` (rows L2-normalised, zero rows for texts that embed to nothing), `save`/`load`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from xtag.models.errors import XtagError, reading
from xtag.models.features.tfidf import TfidfFeaturizer

PROJECTION_FILE = "projection.npy"


def normalised(rows: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length; a zero row stays zero (a text that embeds to nothing), never NaN."""
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0).astype(np.float32)


class LabelTextEncoder:
    """TF-IDF (models/features/tfidf.py) times a terms × dim projection (an SVD of the label texts' TF-IDF)."""

    def __init__(self, tfidf: TfidfFeaturizer, projection: np.ndarray):
        if projection.ndim != 2 or projection.shape[0] != tfidf.dim:
            raise XtagError(f"encoder projection {projection.shape} does not fit {tfidf.dim} TF-IDF terms")
        self.tfidf, self.projection = tfidf, projection.astype(np.float32)

    @property
    def dim(self) -> int:
        return int(self.projection.shape[1])

    def encode_documents(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return normalised(np.asarray(self.tfidf.transform(list(texts)) @ self.projection, dtype=np.float32))

    def encode_labels(self, texts: list[str]) -> np.ndarray:
        return self.encode_documents(texts)

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.tfidf.save(folder / "tfidf")
        np.save(folder / PROJECTION_FILE, self.projection)
        (folder / "config.json").write_text(json.dumps({"kind": "tfidf-svd", "dim": self.dim}))

    @classmethod
    def load(cls, folder: Path) -> LabelTextEncoder:
        tfidf = TfidfFeaturizer.load(folder / "tfidf")
        with reading(folder / PROJECTION_FILE, "the label-text encoder's projection"):
            projection = np.load(folder / PROJECTION_FILE, allow_pickle=False)
        return cls(tfidf, projection)
