"""XR-Transformer's settings: fine-tuning resolutions and objective (on top of the shared transformer ones)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator
from xtag.models.features.onnx_encoder import Pooling, Representation
from xtag.models.xlinear.shortlist import ShortlistConfig
from xtag.training.deep.config import TransformerConfig, TransformerExportConfig
from xtag.training.tree.build import TreeConfig


class XRExportConfig(TransformerExportConfig):
    """What `xtag export` does with an xr-transformer run (ONNX encoder, parity check, FAISS shortlist)."""

    quantize: bool = Field(False, description="older spelling of precision: int8 (kept so older configs load)")
    shortlist: bool = Field(True, description="write the level-1 FAISS shortlist")
    shortlist_config: ShortlistConfig = Field(default_factory=ShortlistConfig)

    @model_validator(mode="after")
    def _quantize_is_int8(self) -> XRExportConfig:
        if self.quantize and self.precision == "fp32":
            self.precision = "int8"
        return self


class XRTransformerConfig(TransformerConfig):
    """XR-Transformer (Algorithms 1-2): multi-resolution fine-tuning, then rankers on Φ_cat (eq. 10)."""

    pooling: Pooling = "mean"
    features: Representation = Field("tfidf+dense", description="rankers on Φ_cat or on the embedding alone")
    epochs: int = Field(1, ge=0, description="fine-tuning epochs per tree level; 0 = frozen pre-trained encoder")
    max_steps: int | None = Field(None, ge=1, description="cap on optimiser steps per level (time budgets)")
    lr_encoder: float = Field(5e-5, gt=0)
    lr_head: float = Field(1e-3, gt=0)
    warmup: float = Field(0.1, ge=0, lt=1, description="fraction of a level's steps with linear warm-up")
    schedule: Literal["linear", "cosine", "constant"] = "linear"
    loss: Literal["squared-hinge", "bce"] = "squared-hinge"
    neg_weight: float = Field(1.0, gt=0, description="α of eq. 6: weight of shortlisted negatives")
    shortlist_k: int = Field(10, ge=1, description="k of eq. 7: previous level's top-k kept in M^(t)")
    bootstrap: bool = Field(True, description="initialise each level's head by eq. 11")
    encode_batch_size: int = Field(64, ge=1)
    tree: TreeConfig = Field(
        default_factory=lambda: TreeConfig(branching=32, max_leaf_size=32),
        description="preliminary tree (TF-IDF PIFA) giving the fine-tuning resolutions",
    )
    export: XRExportConfig = Field(default_factory=XRExportConfig)
