"""How far an exported graph is from what it replaces: the measures every family's export report records, and
the one parity gate every transformer family's export passes (ONNX vs torch on the run's sample texts)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from xtag.models.errors import XtagError
from xtag.training.deep.config import TransformerExportConfig

# A graph's outputs on the parity texts: by output name, or one unnamed array (the encoder's embedding, whose
# report entries stay flat as they were before graphs had several outputs).
Outputs = dict[str, np.ndarray] | np.ndarray


def embedding_diff(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """Max abs difference and mean cosine similarity of two embedding matrices."""
    cos = (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)
    return {"max_abs_diff": float(np.abs(a - b).max()), "mean_cosine": float(cos.mean())}


def top_agreement(a: np.ndarray, b: np.ndarray) -> float:
    """Mean overlap of two top-k label lists (1.0 = same labels; -1 padding ignored)."""
    return float(np.mean([len(set(x[x >= 0]) & set(y[y >= 0])) / max(len(x[x >= 0]), 1) for x, y in zip(a, b)]))


def compare(got: Outputs, want: Outputs) -> dict:
    """`embedding_diff` of each named output (compared in float32), or of the one unnamed output."""
    if isinstance(want, dict):
        return {name: compare(got[name], want[name]) for name in want}
    return embedding_diff(np.asarray(got, np.float32), np.asarray(want, np.float32))


def per_output(measures: dict) -> list[dict]:
    """A `compare` result as one entry per output (a one-output graph's flat entry is that one)."""
    return [measures] if "max_abs_diff" in measures else list(measures.values())


def parity_gate(
    config: TransformerExportConfig,
    texts: int,
    onnx: Outputs,
    torch: Outputs,
    top5: Callable[[Outputs], np.ndarray] | None = None,
) -> dict:
    """The export report's parity part: the ONNX graph's outputs on `texts` parity texts against torch's, and,
    where the family predicts from them (`top5`: outputs → top-5 label ids), how far the two predictions agree.
    Raises, so nothing is published, when any output differs by more than `config.parity_tolerance`."""
    parity = compare(onnx, torch)
    worst = max(m["max_abs_diff"] for m in per_output(parity))
    if not worst <= config.parity_tolerance:
        raise XtagError(
            f"ONNX graph differs from torch by {worst:.3g} on {texts} texts "
            f"(tolerance {config.parity_tolerance}); refusing to export"
        )
    report = {"opset": config.opset, "parity_texts": texts, "parity_tolerance": config.parity_tolerance}
    report["parity"] = parity
    if top5 is not None:
        report["top5_agreement_vs_torch"] = top_agreement(top5(onnx), top5(torch))
    return report
