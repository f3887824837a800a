"""LaMP's settings: the first-stage bundle it re-ranks, C, the message-passing shape, the loss, the budget."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from xtag.training.deep.config import TransformerConfig, TransformerExportConfig


class LampExportConfig(TransformerExportConfig):
    """One ONNX graph (frozen encoder + LaMP), parity-checked against torch on the run's sample texts."""

    precision: Literal["auto", "fp32", "int8", "fp16"] = Field(
        "auto",
        description="auto (the default): int8 weights when their top 5 agree with the fp32 graph's on at least "
        "min_top5_agreement of the parity texts, else fp32, and the export says which and why (debtags: int8 served "
        "1.56x the fp32 batch throughput at the same P@1, bench/RESULTS.md); int8: int8 or no bundle; fp32; fp16",
    )

    optimize: bool = Field(
        False,
        description="onnxruntime's transformer fusions: off by default, the fusion passes are not checked on "
        "LaMP's attention blocks (parity still gates them when on)",
    )
    min_top5_agreement: float = Field(
        0.95,
        ge=0,
        le=1,
        description="int8 (or fp16) weights: the reduced graph's top 5 on the parity texts must agree with the fp32 "
        "graph's on at least this share, else the export is refused (a re-ranker's outputs are its ranking)",
    )
    candidates: int | None = Field(
        None,
        ge=2,
        description="C at serving (`xtag export --candidates`): the re-ranker scores the first stage's top-C, at most "
        "the C it was trained on. None: chosen on the run's held-out texts (lamp.val_fraction) as the smallest of "
        "candidate_grid whose P@1 and PSP@5 there stay within p1_tolerance and psp_tolerance points of the trained "
        "C's; the trained C when the run held none out. The graph's cost grows with C: on debtags C=20 of a C=50 run "
        "scored 1.6x the texts per second in-process with P@1 kept (89.02 against 89.05) and PSP@5 lower (69.70 "
        "against 70.62): fewer candidates keep the head and lose tail labels. Not in the paper, which re-scores a "
        "fixed candidate set.",
    )
    candidate_grid: list[int] = Field(
        [10, 15, 20, 30], description="the Cs under the trained one that the validation choice tries"
    )
    p1_tolerance: float = Field(0.2, ge=0, description="points of validation P@1 a smaller C may lose")
    psp_tolerance: float = Field(1.0, ge=0, description="points of validation PSP@5 a smaller C may lose")


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
        0,
        ge=0,
        description="use the encoder's first N layers only (None: all). Default 0, a deviation (the paper trains its "
        "word embeddings end to end): the frozen token embeddings alone (word + position, normalised), no contextual "
        "layer, measured best for its cost on CPU (debtags: 89.02 P@1 at about 2 ms added, where 2 layers gave 86.73 "
        "at 10 ms; bench/RESULTS.md, issue 25)",
    )
    max_length: int = Field(
        64, ge=8, le=4096, description="tokens per text: 64, the length every LaMP measurement used (issue 25)"
    )
    teacher_forcing: bool = Field(
        False,
        description="put the true labels the first stage missed into the training candidates (at the row's lowest "
        "score), as the issue asked. Off by default, a deviation: LaMP then trains on the top-C as the first stage "
        "gives them, as at test time; forcing teaches it that low-ranked candidates are often true, and cost P@1 in "
        "every run measured (debtags with cross-fitting: 88.02 against 89.02; debdeps: -3 points; bench/RESULTS.md)",
    )
    cross_fit: int | None = Field(
        None,
        ge=0,
        description="K > 1: take each training text's candidates from a copy of the first stage retrained (its "
        "bundle's own config) on the other K-1 folds of LaMP's corpus, so LaMP trains on the corpus the first "
        "stage was trained on without learning from its over-confident top-C; costs K first-stage trainings. "
        "0: the first stage's own top-C (give LaMP texts the first stage did not see). None: 5 for a first stage "
        "without a transformer (XR-Linear: seconds a fold), 0 otherwise (a fold would be a fine-tuning)",
    )
    steps: int = Field(2, ge=1, description="T: message-passing steps (feature→label, then label→label)")
    heads: int = Field(4, ge=1, description="attention heads (must divide the encoder's hidden size)")
    ffn_factor: int = Field(2, ge=1, description="the position-wise MLP's hidden size over the node size")
    dropout: float = Field(0.1, ge=0, lt=1)
    init: Literal["pifa", "name", "text"] = Field(
        "pifa",
        description="label embeddings start from PIFA (mean embedding of the label's training texts; labels with "
        "none fall back to their name), from the encoder's embedding of the label name, or (text) from its "
        "embedding of the label's text in the label file (the first stage's, or --labels), so a label no training "
        "document carries starts from what it says; labels without text start as pifa",
    )
    intermediate_weight: float = Field(1.0, ge=0, description="λ: weight of the intermediate readouts' BCE")
    epochs: int = Field(3, ge=1, description="3: the measured runs' budget (8 epochs gave no more P@1 on debtags)")
    val_fraction: float = Field(
        0.0,
        ge=0,
        lt=0.5,
        description="share of LaMP's texts held out to pick the epoch (training/lamp/selection.py): after each "
        "epoch the re-ranked P@1 on them is measured and the best epoch's weights are kept, so lamp.epochs becomes "
        "the most it trains; `xtag export` also chooses the served C on them (lamp.export.candidates); 0: every "
        "text trains and the last epoch is kept (the held-out texts do not train)",
    )
    lr: float = Field(1e-3, gt=0, description="AdamW learning rate of the LaMP layers (the encoder is frozen)")
    export: LampExportConfig = Field(default_factory=LampExportConfig)

    @field_validator("cross_fit")
    @classmethod
    def _folds(cls, v: int | None) -> int | None:
        if v == 1:
            raise ValueError("cross_fit needs at least 2 folds (or 0 for none)")
        return v
