"""XR-Linear export: the run's arrays are already the bundle's (TF-IDF, tree, rankers); nothing to convert."""

from __future__ import annotations

from pathlib import Path

from training.config import TrainConfig
from training.export import copy_run_model


def export(run_model: Path, tmp: Path, config: TrainConfig) -> dict:
    copy_run_model(run_model, tmp)
    return {}
