"""LightXML's settings: clusters, heads, negatives, SWA and model selection (on top of the shared ones)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from xtag.training.deep.config import TransformerConfig, TransformerExportConfig


class LightXMLExportConfig(TransformerExportConfig):
    """What `xtag export` does with a lightxml run (one ONNX graph, parity check, label index)."""

    faiss_min_labels: int = Field(100_000, ge=0, description="label embeddings in a FAISS index from this many labels")


class LightXMLConfig(TransformerConfig):
    """LightXML (Jiang et al. 2021): one transformer, generator over label clusters, discriminator over their labels."""

    last_layers: int = Field(5, ge=1, description="[CLS] vectors of the last N layers, concatenated")
    dropout: float = Field(0.5, ge=0, lt=1, description="dropout on the concatenated [CLS] vectors")
    cluster_size: int = Field(100, ge=1, description="C: at most this many labels per cluster")
    flat_max_labels: int = Field(
        5000,
        ge=0,
        description="up to this many labels, one label per cluster (as the paper does for Eurlex-4K .. Wiki10-31K)",
    )
    flat_discriminator: bool = Field(
        False,
        description="one label per cluster: also train the discriminator and multiply its score in. Off (default), "
        "the generator alone scores every label, as the paper says for small label sets ('we can get each label "
        "scores in label recalling part') and the authors' code does (no discriminator there)",
    )
    prior_bias: bool = Field(
        True,
        description="start the generator's biases at the log-odds of each cluster's training frequency instead of "
        "near 0 (a deviation: the paper does not say how the heads start). One 3,000-text debtags epoch: P@1 77.6 "
        "with it, 48.8 without (bench/RESULTS.md); false: PyTorch's default init",
    )
    top_clusters: int = Field(
        10,
        ge=1,
        description="b: the generator's top clusters whose labels the "
        "discriminator scores (training and default prediction)",
    )
    hidden_dim: int = Field(300, ge=1, description="bottleneck = label-embedding dimension")
    negatives: Literal["dynamic", "static"] = Field(
        "dynamic",
        description="dynamic: re-drawn by the generator every "
        "step (eq. 2); static: drawn once after a generator-only phase",
    )
    static_warmup: float = Field(
        0.5,
        gt=0,
        lt=1,
        description="static: fraction of the steps training the generator alone before the negatives are fixed",
    )
    reduction: Literal["mean", "sum"] = Field(
        "mean",
        description="L_g and L_d per text: means over the clusters / candidates (the authors' code), or the sums of "
        "eq. 1 and 5 (which weigh the generator's K clusters against the discriminator's few candidates)",
    )
    epochs: int = Field(5, ge=1)
    batch_size: int = Field(16, ge=1, description="texts per step and device")
    lr: float = Field(1e-4, gt=0, description="AdamW learning rate of the encoder (paper: 1e-4, constant)")
    lr_head: float | None = Field(
        None,
        gt=0,
        description="learning rate of the generator, bottleneck and label embeddings; default 10 × lr (CascadeXML's "
        "ratio: at lr, one 3,000-text epoch reached P@1 39.4, at 10 × lr 47.0, bench/RESULTS.md). The paper runs "
        "everything at lr for 20+ epochs: set lr_head to lr for that",
    )
    warmup: float = Field(0.0, ge=0, lt=1, description="fraction of the steps in linear warm-up (the paper: none)")
    schedule: Literal["constant", "linear", "cosine"] = Field(
        "constant", description="after the warm-up: the paper's constant rate, or linear / cosine decay to zero"
    )
    max_grad_norm: float | None = Field(None, gt=0, description="gradient clipping (the paper does not clip)")
    swa_start: float = Field(1.0, ge=0, description="epoch (fractions allowed) from which weights are averaged")
    swa_every: int = Field(200, ge=1, description="optimiser steps between SWA updates")
    val_fraction: float = Field(0.05, ge=0, lt=0.5, description="training documents held out for model selection")
    min_val_documents: int = Field(
        50,
        ge=1,
        description="fewer held-out documents than this: no model selection (they train instead; the last, or "
        "SWA-averaged, weights are kept), since P@k on a handful of documents picks a checkpoint by chance",
    )
    eval_every: int | None = Field(None, ge=1, description="steps between validations (default: each epoch end)")
    export: LightXMLExportConfig = Field(default_factory=LightXMLExportConfig)
