"""The label-text encoder's section of a training config (issue 49): its kind, width and contrastive training."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from xtag.models.features.tfidf import TfidfConfig
from xtag.training.deep.config import default_encoder


class LabelTextConfig(BaseModel):
    """Which encoder embeds documents and label texts, and how it is trained (InfoNCE: in-batch negatives plus
    the tree's hard negatives, DEXML's and NGAME's loss)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["tfidf", "tfidf-linear", "static-linear"] = Field(
        "tfidf-linear",
        description="tfidf: TF-IDF cosine, untrained (the baseline); tfidf-linear: TF-IDF × a learned tower per "
        "side (the default: best recall@100 on debdeps, bench/RESULTS.md); static-linear: the distilled MiniLM "
        "static embedding × a learned tower per side",
    )
    dim: int = Field(256, ge=2, description="embedding columns of the learned kinds")
    shared: bool = Field(
        False,
        description="one tower for documents and label texts (siamese): on debdeps better for labels no training "
        "document carries, worse for the others",
    )
    tfidf: TfidfConfig = Field(
        default_factory=lambda: TfidfConfig(ngram_max=1, min_df=2),
        description="the encoder's own TF-IDF (tfidf kinds), fitted on the training documents and the label texts",
    )
    source: Path | None = Field(
        default_factory=default_encoder,
        description="static-linear: the teacher its token table is distilled from (default MiniLM-L6)",
    )
    epochs: int = Field(
        2, ge=0, description="passes over the (document, label) pairs of the training corpus (2: bench/label_encoders)"
    )
    batch_size: int = Field(1024, ge=2, description="(document, label) pairs per step: each other's negatives")
    hard_negatives: int = Field(
        1, ge=0, description="labels per document drawn from its tree shortlist (not its own) as extra negatives"
    )
    balance: float = Field(
        0.0,
        ge=0,
        le=1,
        description="pairs drawn ∝ their label's training frequency^-balance (0: every pair once an epoch)",
    )
    temperature: float = Field(0.05, gt=0, description="softmax temperature of the scores (cosines)")
    lr: float = Field(0.01, gt=0, description="Adam step of the towers")
    seed: int = Field(0, description="towers' initialisation and the pairs' order")
