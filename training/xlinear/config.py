"""XR-Linear's settings: the label tree and the per-level one-vs-all rankers (also XR-Transformer's final rankers)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from xtag.models.inference.types import PostProcessor
from xtag.training.tree.build import TreeConfig

Loss = Literal["squared-hinge", "logistic"]


class XLinearConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    loss: Loss = Field(
        "squared-hinge", description="ranker surrogate; the missing-label weighting is the `missing_labels` section"
    )
    C: float = Field(1.0, gt=0, description="inverse L2 regularisation strength")
    tol: float = Field(0.1, gt=0, description="liblinear stopping tolerance")
    max_iter: int = Field(100, ge=1)
    threshold: float = Field(0.1, ge=0, description="prune weights with |w| below this")
    negatives: Literal["tfn", "man", "tfn+man"] = Field(
        "tfn", description="teacher-forced (true parents), matcher-aware (top of level above), or both"
    )
    man_k: int | None = Field(None, ge=1, description="matcher-aware shortlist size; default: beam_size")
    beam_size: int = Field(10, ge=1)
    post_processor: PostProcessor = "l3-hinge"
    n_jobs: int = Field(0, ge=0, description="threads; 0 = all cores")
    tree: TreeConfig = Field(default_factory=TreeConfig)
