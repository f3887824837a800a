"""Export: turn a finished run into a verified serving bundle.

The family's exporter (named in the registry) writes its files into a temporary folder (XR-Linear
copies its arrays; the transformer families export and parity-check ONNX graphs); this module
writes the manifest, loads the result back as a check and only then publishes it under its name.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from models.bundle import load_bundle
from models.errors import XtagError
from models.manifest import write_manifest
from models.registry import family
from training.config import TrainConfig

log = logging.getLogger("xtag.export")


@contextmanager
def step(what: str) -> Iterator[None]:
    """Log a slow export step when it starts and what it took: a transformer export runs for a minute,
    and `xtag export` (which shows this logger) should say what it is doing meanwhile."""
    log.info("%s ...", what)
    start = time.perf_counter()
    yield
    log.info("%s: done in %.1f s", what, time.perf_counter() - start)


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """Hugging Face's info/warning chatter (weights loading, deprecations) off for the duration; only for
    families that bring transformers, so an XR-Linear export never imports it."""
    import transformers

    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        yield
    finally:
        transformers.logging.set_verbosity(verbosity)


def copy_run_model(run_model: Path, tmp: Path, leave_out: tuple[str, ...] = ()) -> None:
    """The run's model folder as the bundle's start, without the top-level entries in `leave_out`
    (the torch encoder the bundle replaces by ONNX, or features the bundle does not read)."""
    shutil.copytree(run_model, tmp, ignore=lambda folder, names: list(leave_out) if Path(folder) == run_model else [])


def export_run(
    run: Path,
    out: Path,
    name: str | None = None,
    overwrite: bool = False,
    shortlist_min_nodes: int | None = None,
    precision: str | None = None,
    optimize: bool | None = None,
) -> dict:
    """Write the run's final model as a bundle in `out`, with its manifest, and load it back as a check.

    `shortlist_min_nodes` overrides the run's `export.shortlist_config.min_nodes` (families that write a
    FAISS level-1 index): 0 always writes it. `precision` (fp32, int8, fp16) and `optimize` (transformer
    fusions) override the run's export settings of the transformer families (training/onnx_optimize.py).
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
    for key, value in (("precision", precision), ("optimize", optimize)):
        if value is None:
            continue
        if not hasattr(export_settings, key):
            raise XtagError(f"{key}: only transformer bundles have an ONNX graph ({config.model} has none)")
        setattr(export_settings, key, value)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    chosen = family(config.model)
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
        load_bundle(tmp)  # refuse to publish a bundle that does not load
    tmp.rename(out)
    return manifest
