"""LaMP's settings: the first-stage bundle it re-ranks, C, the message-passing shape, the loss, the budget."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from xtag.training.deep.config import TransformerConfig, TransformerExportConfig


class LampExportConfig(TransformerExportConfig):
    """One ONNX graph (frozen encoder + LaMP), parity-checked against torch on the run's sample texts."""

    optimize: bool = Field(
        False,
        description="onnxruntime's transformer fusions: off by default, the fusion passes are not checked on "
        "LaMP's attention blocks (parity still gates them when on)",
    )


class LampConfig(TransformerConfig):
    """LaMP (Lanchantin et al. 2019) as a second stage over a first-stage bundle's top-C candidates."""

    first_stage: Path | None = Field(
        None, description="the first-stage bundle (any family) whose candidates LaMP re-ranks"
    )
    candidates: int = Field(50, ge=2, description="C: first-stage candidates re-scored per text")
    graph: Literal["fc", "pr"] = Field(
        "fc", description="label-to-label graph: fc (all candidates) or pr (pairs co-occurring in training)"
    )
    dim: int = Field(128, ge=8, description="node size (token states are projected to it from the encoder's)")
    encoder_layers: int | None = Field(
        None,
        ge=0,
        description="use the encoder's first N layers only (None: all): a faster re-ranker on CPU; 0 = its token "
        "embeddings alone (word + position, normalised), no contextual layer",
    )
    teacher_forcing: bool = Field(
        True,
        description="put the true labels the first stage missed into the training candidates (at the row's lowest "
        "score); off: train on the top-C as the first stage gives them, as at test time (where it recalls few of "
        "the true labels, forcing teaches that low-ranked candidates are often true: bench/RESULTS.md, debdeps)",
    )
    steps: int = Field(2, ge=1, description="T: message-passing steps (feature→label, then label→label)")
    heads: int = Field(4, ge=1, description="attention heads (must divide the encoder's hidden size)")
    ffn_factor: int = Field(2, ge=1, description="the position-wise MLP's hidden size over the node size")
    dropout: float = Field(0.1, ge=0, lt=1)
    init: Literal["pifa", "name"] = Field(
        "pifa",
        description="label embeddings start from PIFA (mean embedding of the label's training texts; labels with "
        "none fall back to their name) or from the encoder's embedding of the label name",
    )
    intermediate_weight: float = Field(1.0, ge=0, description="λ: weight of the intermediate readouts' BCE")
    epochs: int = Field(4, ge=1)
    lr: float = Field(1e-3, gt=0, description="AdamW learning rate of the LaMP layers (the encoder is frozen)")
    export: LampExportConfig = Field(default_factory=LampExportConfig)
