"""Export: turn a finished run directory into a verified serving bundle."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from models.bundle import load_bundle, write_manifest
from models.errors import XtagError
from training.config import TrainConfig


def export_run(run: Path, out: Path, name: str | None = None, overwrite: bool = False) -> dict:
    """Copy the run's final model into `out`, write the manifest, and load it back as a check."""
    model = run / "model"
    if not model.is_dir():
        raise XtagError(f"{run}: no finished model (train it first, or resume it)")
    if out.exists():
        if not overwrite:
            raise XtagError(f"{out}: already exists (use --overwrite)")
        shutil.rmtree(out)
    config = TrainConfig.load(run / "config.json")
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(model, tmp)
    summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").exists() else {}
    manifest = write_manifest(tmp, config.model, name or run.name, extra={
        "feature_config": {"tfidf": config.tfidf.model_dump()},
        "training": {"config": json.loads(config.model_dump_json()), "summary": summary},
    })
    load_bundle(tmp)  # refuse to publish a bundle that does not load
    tmp.rename(out)
    return manifest
