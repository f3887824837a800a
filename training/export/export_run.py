"""Export: turn a finished run into a verified serving bundle.

The family's exporter (named in the registry) writes its files into a temporary folder (XR-Linear
copies its arrays; the transformer families export and parity-check ONNX graphs); this module
writes the manifest, loads the result back as a check and only then publishes it under its name.
"""

from __future__ import annotations

import json
import shutil
from contextlib import nullcontext
from pathlib import Path

from xtag.models.bundle.loader import load_bundle
from xtag.models.bundle.manifest import write_manifest
from xtag.models.errors import XtagError
from xtag.models.families import family
from xtag.models.files.finite_scan import array_files, refuse_nonfinite
from xtag.training.config import TrainConfig
from xtag.training.export.steps import quiet_transformers, step


def export_run(
    run: Path,
    out: Path,
    name: str | None = None,
    overwrite: bool = False,
    shortlist_min_nodes: int | None = None,
    precision: str | None = None,
    optimize: bool | None = None,
    candidates: int | None = None,
) -> dict:
    """Write the run's final model as a bundle in `out`, with its manifest, and load it back as a check.

    `shortlist_min_nodes` overrides the run's `export.shortlist_config.min_nodes` (families that write a
    FAISS level-1 index): 0 always writes it. `precision` (fp32, int8, fp16) and `optimize` (transformer
    fusions) override the run's export settings of the transformer families (training/onnx/optimize.py);
    `candidates` the C a re-ranker serves with (LaMP's lamp.export.candidates).
    """
    model = run / "model"
    if not run.is_dir():
        raise XtagError(f"{run}: no such run directory" if not run.exists() else f"{run}: not a run directory")
    if (run / "manifest.json").is_file():
        raise XtagError(f"{run}: already a bundle, not a training run (serve it: xtag serve {run})")
    if not model.is_dir():
        raise XtagError(f"{run}: no finished model (train it first, or resume it)")
    if out.exists():
        if not overwrite:
            raise XtagError(f"{out}: already exists (use --overwrite)")
        shutil.rmtree(out)
    config = TrainConfig.load(run / "config.json")
    chosen = family(config.model)
    export_settings = config.export_settings
    if shortlist_min_nodes is not None:
        chosen.require("shortlist", "--shortlist-min-nodes")
        export_settings.shortlist_config.min_nodes = shortlist_min_nodes
    if precision is not None:
        flag = {"int8": "--quantize int8", "fp16": "--fp16"}.get(precision, f"precision {precision}")
        chosen.require(precision if precision in ("int8", "fp16") else "transformer", flag)
        export_settings.precision = precision
    if optimize is not None:
        chosen.require("onnx-optimize", "--optimize" if optimize else "--no-optimize")
        export_settings.optimize = optimize
    if candidates is not None:
        chosen.require("rerank-candidates", f"--candidates {candidates}")
        export_settings.candidates = candidates
    # The server's NaN scan (models/files/finite_scan.py) on what is exported, and below on the bundle: a run resumed or
    # trained into NaN weights would export fine, and `xtag predict` would answer garbage.
    refuse_nonfinite(model, array_files(model), "not exported")
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    with quiet_transformers() if chosen.train_needs else nullcontext():
        report = chosen.resolve("export")(model, tmp, config)
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
    with step("loading the bundle back as a check"):
        load_bundle(tmp)  # refuse to publish a bundle that does not load, or holds NaN (load_bundle scans it)
    tmp.rename(out)
    return manifest
