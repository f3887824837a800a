"""CascadeXML's settings: label resolutions, layer recipe, per-level heads and shortlists, the LR schedule."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator
from xtag.training.deep.config import TransformerConfig, TransformerExportConfig


class CascadeXMLExportConfig(TransformerExportConfig):
    """What `xtag export` does with a cascadexml run (one ONNX graph, parity-checked against torch)."""

    outputs: Literal["features", "logits"] = Field(
        "features",
        description="features: the graph returns each level's [CLS] feature and numpy applies the heads to the "
        "shortlisted nodes only; logits: the graph returns every level's logits for the whole level",
    )


class CascadeXMLConfig(TransformerConfig):
    """CascadeXML (Kharbanda et al. 2022): one transformer pass, each label resolution scored from its own layer."""

    branching: int = Field(16, ge=2, description="B: children per cluster of the label tree (B-ary k-means on PIFA)")
    max_leaf_size: int = Field(8, ge=1, description="at most this many labels per leaf cluster")
    layers: list[list[int]] | None = Field(
        None,
        description="per resolution, coarse first, the encoder layers (1-based) whose [CLS] vectors it reads; only "
        "level 0 may list several (concatenated). Default: the reference's rule scaled to the encoder's depth",
    )
    dropouts: list[float] | None = Field(
        None,
        description="dropout on each resolution's feature (default: the reference's 0.2/0.25/0.4/0.5 for four "
        "resolutions, else evenly from 0.2 to 0.5)",
    )
    feature_dropout: float = Field(0.2, ge=0, lt=1, description="dropout before level 0's Linear back to hidden size")
    beam_size: int = Field(16, ge=1, description="top-k clusters kept at each cluster level (the service's beam)")
    top_k: list[int] | None = Field(
        None, description="per cluster level, coarse first: its top-k (overrides beam_size level by level)"
    )
    loss_weights: list[float] | None = Field(None, description="weight of each resolution's BCE (default: all 1)")
    epochs: int = Field(1, ge=1)
    lr: float = Field(1e-4, gt=0, description="encoder learning rate (heads: lr_head_factor × lr, wd / 10)")
    lr_head_factor: float = Field(10.0, gt=0, description="the heads' learning rate over the encoder's")
    warmup: float = Field(0.1, ge=0, lt=1, description="fraction of the steps in cosine warm-up")
    anneal: float = Field(0.2, ge=0, lt=1, description="fraction of the steps in cosine annealing at the end")
    max_grad_norm: float | None = Field(None, gt=0, description="gradient clipping (the reference does not clip)")
    export: CascadeXMLExportConfig = Field(default_factory=CascadeXMLExportConfig)

    @model_validator(mode="after")
    def _phases(self) -> CascadeXMLConfig:
        if self.warmup + self.anneal > 1:
            raise ValueError("warmup + anneal must not exceed 1")
        if self.layers is not None and any(len(group) != 1 for group in self.layers[1:]):
            raise ValueError("layers: only level 0 reads several layers (concatenated); others read one each")
        return self
