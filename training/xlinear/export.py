"""XR-Linear export: the run's arrays (TF-IDF, tree, rankers) plus the compiled engine's layout of the rankers."""

from __future__ import annotations

from pathlib import Path

from xtag.models.xlinear.model import XLinearModel
from xtag.training.config import TrainConfig
from xtag.training.export.steps import copy_run_model


def export(run_model: Path, tmp: Path, config: TrainConfig) -> dict:
    copy_run_model(run_model, tmp)
    XLinearModel.load(tmp).save_engine_layout(tmp / "rankers")
    return {}
