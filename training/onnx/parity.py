"""How far an exported graph is from what it replaces: the measures every family's export report records."""

from __future__ import annotations

import numpy as np


def embedding_diff(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """Max abs difference and mean cosine similarity of two embedding matrices."""
    cos = (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)
    return {"max_abs_diff": float(np.abs(a - b).max()), "mean_cosine": float(cos.mean())}


def top_agreement(a: np.ndarray, b: np.ndarray) -> float:
    """Mean overlap of two top-k label lists (1.0 = same labels; -1 padding ignored)."""
    return float(np.mean([len(set(x[x >= 0]) & set(y[y >= 0])) / max(len(x[x >= 0]), 1) for x, y in zip(a, b)]))
