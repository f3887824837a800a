"""NGAME's fusion: one logistic regression scores every candidate of a document from the tree's score, the
encoder's cosine and what the label's training data says, so a label no training document carries (no tree score)
competes with the tree's labels on one scale. Fitted by training/label_text/fusion.py; stored as JSON."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator
from xtag.models.errors import reading
from xtag.models.files.atomic import write_text_atomic

# One column per feature, in this order (the JSON names them, so a reordering fails at load instead of scoring
# wrong): the tree's raw score (0 when the tree did not propose the label), whether it did not, the cosine between
# the document's and the label's embeddings, and log(1 + the label's training documents), whether it has none,
# and the cosine of labels the tree did not propose (the fusion trusts the cosine alone more there).
FEATURES = ("tree_score", "tree_absent", "cosine", "log_frequency", "no_documents", "cosine_absent")


class Fusion(BaseModel):
    """label_text/fusion.json: the candidates' widths, the logistic regression's weights per feature and its
    intercept."""

    model_config = ConfigDict(extra="forbid")

    features: tuple[str, ...] = FEATURES
    weights: list[float]
    intercept: float
    tree_candidates: int = Field(20, ge=1, description="K: the tree's top K per document")
    index_candidates: int = Field(20, ge=1, description="M: the label index's top M per document")
    heldout_documents: int = Field(0, ge=0, description="the held-out documents it was fitted on")

    @field_validator("features")
    @classmethod
    def _known(cls, features: tuple[str, ...]) -> tuple[str, ...]:
        if tuple(features) != FEATURES:
            raise ValueError(f"features {list(features)} are not this version's {list(FEATURES)}")
        return features

    @field_validator("weights")
    @classmethod
    def _one_finite_weight_each(cls, weights: list[float]) -> list[float]:
        if len(weights) != len(FEATURES) or not np.isfinite(weights).all():
            raise ValueError(f"need {len(FEATURES)} finite weights, got {weights}")
        return weights

    def logits(self, features: np.ndarray) -> np.ndarray:
        return (features @ np.asarray(self.weights, np.float32) + np.float32(self.intercept)).astype(np.float32)

    def save(self, path: Path) -> None:
        write_text_atomic(path, self.model_dump_json(indent=2))

    @classmethod
    def load(cls, path: Path) -> Fusion:
        with reading(path, "the label-text fusion"):
            return cls.model_validate_json(path.read_text())


def candidate_features(
    tree_scores: np.ndarray, absent: np.ndarray, cosine: np.ndarray, frequency: np.ndarray
) -> np.ndarray:
    """(..., len(FEATURES)) float32 from same-shaped arrays; absent tree scores must already be 0."""
    absent = absent.astype(np.float32)
    return np.stack(
        [
            tree_scores.astype(np.float32),
            absent,
            cosine.astype(np.float32),
            np.log1p(frequency).astype(np.float32),
            (frequency == 0).astype(np.float32),
            cosine.astype(np.float32) * absent,
        ],
        axis=-1,
    )
