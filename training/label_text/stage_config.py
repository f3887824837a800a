"""The `label_text` section of a training run: the label-text stage that XR-Linear trains after its rankers when a
label file with texts is given (`--set label_text.enabled=false` turns it off)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from xtag.models.label_text.index import LabelIndexConfig
from xtag.training.label_text.config import LabelTextConfig


class LabelTextStageConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="train the stage when --labels gives texts (xlinear)")
    tree_candidates: int = Field(20, ge=1, description="K: the tree's top K candidates per document")
    index_candidates: int = Field(20, ge=1, description="M: the label index's top M candidates per document")
    heldout_fraction: float = Field(
        0.1, gt=0.0, lt=0.5, description="training documents held out of a second tree to fit the fusion on"
    )
    max_heldout: int = Field(5000, ge=100, description="at most this many held-out documents")
    # One place: debdeps' test-only recall@10 29.98 → 33.50 %, P@10 27.30 → 26.63 (the logistic fusion's 26.19); two
    # places 35.03 % and 25.71, three 35.66 % and 24.63 (bench/RESULTS.md, "label_text_fusion"). P@1..P@5 never move.
    new_label_places: int = Field(
        1, ge=0, description="of a top k, places after the fifth kept for the best labels with no training document"
    )
    fusion: Literal["boosted-trees", "logistic"] = Field(
        "boosted-trees",
        description="the fusion's model: boosted trees over every candidate feature, or the first "
        "bundles' logistic regression over six",
    )
    seed: int = 0
    # The untrained TF-IDF cosine by default: on debdeps (bench/RESULTS.md, label_text_stage_crossfit: the encoder
    # kept off the held-out documents) the stage over it reached P@1 74.12, PSP@5 32.66 and test-only recall@10
    # 21.5 %, over the contrastive tfidf-linear encoder's 71.97, 25.83 and 10.3 % (540 s of training against 69 s);
    # `--set label_text.encoder.kind=tfidf-linear` trains that one.
    encoder: LabelTextConfig = Field(default_factory=lambda: LabelTextConfig(kind="tfidf"))
    index: LabelIndexConfig = Field(default_factory=LabelIndexConfig)
