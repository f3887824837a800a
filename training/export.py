"""Export: turn a finished run into a verified serving bundle.

The family's exporter (named in the registry) writes its files into a temporary folder (XR-Linear
copies its arrays; the transformer families export and parity-check ONNX graphs); this module
writes the manifest, loads the result back as a check and only then publishes it under its name.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from models.bundle import load_bundle
from models.errors import XtagError
from models.manifest import write_manifest
from models.registry import family
from training.config import TrainConfig


def copy_run_model(run_model: Path, tmp: Path, leave_out: tuple[str, ...] = ()) -> None:
    """The run's model folder as the bundle's start, without the top-level entries in `leave_out`
    (the torch encoder the bundle replaces by ONNX, or features the bundle does not read)."""
    shutil.copytree(run_model, tmp, ignore=lambda folder, names: list(leave_out) if Path(folder) == run_model else [])


def export_run(
    run: Path, out: Path, name: str | None = None, overwrite: bool = False, shortlist_min_nodes: int | None = None
) -> dict:
    """Write the run's final model as a bundle in `out`, with its manifest, and load it back as a check.

    `shortlist_min_nodes` overrides the run's `export.shortlist_config.min_nodes` (families that write a
    FAISS level-1 index): 0 always writes it.
    """
    model = run / "model"
    if not model.is_dir():
        raise XtagError(f"{run}: no finished model (train it first, or resume it)")
    if out.exists():
        if not overwrite:
            raise XtagError(f"{out}: already exists (use --overwrite)")
        shutil.rmtree(out)
    config = TrainConfig.load(run / "config.json")
    export_settings = getattr(config.family_settings, "export", None)
    if shortlist_min_nodes is not None and hasattr(export_settings, "shortlist_config"):
        export_settings.shortlist_config.min_nodes = shortlist_min_nodes
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    report = family(config.model).resolve("export")(model, tmp, config)
    summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").exists() else {}
    manifest = write_manifest(
        tmp,
        config.model,
        name or run.name,
        extra={
            "feature_config": {"tfidf": config.tfidf.model_dump()} if (tmp / "features" / "tfidf").is_dir() else {},
            "training": {"config": json.loads(config.model_dump_json()), "summary": summary},
            **({"export": report} if report else {}),
        },
    )
    load_bundle(tmp)  # refuse to publish a bundle that does not load
    tmp.rename(out)
    return manifest
