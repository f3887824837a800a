"""Score calibration: a monotone map from a model's scores to probabilities, stored as data.

The beam search's scores (products of post-processed level scores) rank well but are not
probabilities, so a `threshold` on them, or η for macro-optimal inference, means little. An
isotonic regression fitted on a validation split (documents the model did not train on) maps each
score to the observed frequency of a candidate with that score being relevant. It is stored as its
breakpoints in the bundle's calibration.json (JSON, never pickle) and applied with np.interp, which
reproduces scikit-learn's IsotonicRegression(out_of_bounds="clip") exactly. The map is
non-decreasing, so it never reorders a document's labels (ties may appear where it is flat).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator
from xtag.models.errors import XtagError

CALIBRATION_FILE = "calibration.json"
ECE_BINS = 15


class Calibration(BaseModel):
    """Breakpoints (x: score, y: probability) of a non-decreasing piecewise-linear map, plus provenance."""

    model_config = ConfigDict(extra="forbid")

    method: Literal["isotonic"] = "isotonic"
    x: list[float] = Field(..., min_length=1)
    y: list[float] = Field(..., min_length=1)
    fitted_on: dict = Field(default_factory=dict, description="corpus, documents, pairs, ECE before/after (fit)")
    _xa: np.ndarray = PrivateAttr()
    _ya: np.ndarray = PrivateAttr()

    @model_validator(mode="after")
    def _check(self) -> Calibration:
        x, y = np.asarray(self.x, dtype=np.float64), np.asarray(self.y, dtype=np.float64)
        if x.shape != y.shape:
            raise ValueError(f"x has {len(x)} breakpoints, y {len(y)}")
        if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
            raise ValueError("breakpoints must be finite")
        if np.any(np.diff(x) < 0) or np.any(np.diff(y) < 0):
            raise ValueError("breakpoints must be non-decreasing in x and y")
        if y[0] < 0 or y[-1] > 1:
            raise ValueError("probabilities must lie in [0, 1]")
        self._xa, self._ya = x, y
        return self

    def apply(self, scores: np.ndarray) -> np.ndarray:
        """Probabilities for scores of any shape; non-finite entries (-inf padding) are kept as they are."""
        s = np.asarray(scores)
        finite = np.isfinite(s)
        out = np.where(finite, np.interp(np.where(finite, s, 0.0), self._xa, self._ya), s)
        return out.astype(s.dtype if np.issubdtype(s.dtype, np.floating) else np.float64)

    def save(self, path: Path) -> None:
        path.write_text(self.model_dump_json(indent=1))

    @classmethod
    def load(cls, path: Path) -> Calibration:
        try:
            return cls.model_validate(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError, ValidationError) as exc:
            raise XtagError(f"{path}: not a valid calibration file ({exc})") from exc


def fit_isotonic(scores: np.ndarray, relevant: np.ndarray, fitted_on: dict | None = None) -> Calibration:
    """Isotonic regression of relevance on score (scikit-learn), kept as breakpoints."""
    from sklearn.isotonic import IsotonicRegression

    s = np.asarray(scores, dtype=np.float64).ravel()
    r = np.asarray(relevant, dtype=np.float64).ravel()
    if s.shape != r.shape or s.size < 2:
        raise XtagError(f"calibration needs matching score and relevance vectors of ≥ 2 pairs, got {s.size}, {r.size}")
    if not np.all(np.isfinite(s)):
        raise XtagError("calibration scores must be finite (drop padding first)")
    iso = IsotonicRegression(out_of_bounds="clip", y_min=0.0, y_max=1.0, increasing=True).fit(s, r)
    return Calibration(x=iso.X_thresholds_.tolist(), y=iso.y_thresholds_.tolist(), fitted_on=fitted_on or {})


def expected_calibration_error(prob: np.ndarray, relevant: np.ndarray, n_bins: int = ECE_BINS) -> float:
    """ECE in percent: Σ_b (n_b / N)·|mean relevance_b − mean probability_b| over equal-width bins of [0, 1]."""
    p = np.clip(np.asarray(prob, dtype=np.float64).ravel(), 0.0, 1.0)
    r = np.asarray(relevant, dtype=np.float64).ravel()
    if p.shape != r.shape:
        raise XtagError(f"{p.size} probabilities for {r.size} relevance values")
    if p.size == 0:
        return 0.0
    b = np.minimum((p * n_bins).astype(np.int64), n_bins - 1)
    gap = np.abs(np.bincount(b, weights=r, minlength=n_bins) - np.bincount(b, weights=p, minlength=n_bins))
    return float(100.0 * gap.sum() / p.size)  # Σ_b |Σ r − Σ p| / N = Σ_b (n_b/N)·|acc_b − conf_b|


def scored_pairs(labels: np.ndarray, scores: np.ndarray, hits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(score, relevant) of every real prediction (label ≥ 0, finite score), flattened."""
    keep = (np.asarray(labels) >= 0) & np.isfinite(scores)
    return np.asarray(scores, dtype=np.float64)[keep], np.asarray(hits, dtype=bool)[keep]
