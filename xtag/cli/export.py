"""`xtag export`: a run directory -> a self-describing serving bundle."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from xtag.cli.options import echo_log, fail, failing, finish
from xtag.models.errors import XtagError

Opt = typer.Option
SHORTLIST_HELP = (
    "xr-transformer: write the FAISS level-1 index only from this many level-1 nodes (default: the run's config, "
    "4096; 0 = always)"
)
CANDIDATES_HELP = (
    "lamp bundles: re-score the first stage's top-C (at most the C it was trained on; default: chosen on the run's "
    "held-out texts, lamp.val_fraction, else the trained C). Fewer is faster and keeps P@1 but loses tail labels"
)
QUANTIZE_HELP = (
    "transformer bundles: 'int8' ships dynamic int8 weights for CPUs (its accuracy cost goes into the export report); "
    "'none': fp32. LaMP's default: int8 when its top 5 agree with fp32's (lamp.export.min_top5_agreement), else fp32"
)


def export(
    run: Annotated[Path, typer.Argument(help="run directory written by `xtag train`")],
    out: Annotated[Path, Opt(help="bundle directory to write")],
    name: Annotated[str | None, Opt(help="model name in the manifest (default: run folder name)")] = None,
    overwrite: Annotated[bool, Opt(help="replace an existing bundle")] = False,
    shortlist_min_nodes: Annotated[int | None, Opt(min=0, help=SHORTLIST_HELP)] = None,
    progress: Annotated[bool, Opt(help="say what each slow step (ONNX export, parity check, index) is doing")] = True,
    quantize: Annotated[str | None, Opt(help=QUANTIZE_HELP)] = None,
    fp16: Annotated[bool, Opt("--fp16", help="transformer bundles: half-precision weights, for GPU serving")] = False,
    optimize: Annotated[
        bool | None, Opt(help="transformer bundles: onnxruntime's transformer fusions (default: the run's config, on)")
    ] = None,
    candidates: Annotated[int | None, Opt(min=2, help=CANDIDATES_HELP)] = None,
) -> None:
    """Turn a run into a self-describing serving bundle (manifest with versions and checksums)."""
    from xtag.training.export.export_run import export_run

    if quantize not in (None, "int8", "none"):
        fail(XtagError(f"--quantize {quantize}: the one quantisation offered is int8 ('none': fp32 weights)"))
    if quantize and fp16:
        fail(XtagError(f"--quantize {quantize} and --fp16 exclude each other: int8 is for CPUs, fp16 for GPUs"))
    precision = {"int8": "int8", "none": "fp32"}.get(quantize or "") or ("fp16" if fp16 else None)
    with failing(), echo_log("xtag.export", "export", progress):
        manifest = export_run(run, out, name, overwrite, shortlist_min_nodes, precision, optimize, candidates)
    _summary(out, manifest)
    finish(f"wrote bundle {out}", f"xtag serve {out}  (or: xtag evaluate {out} --corpus TEST)")


def _summary(out: Path, manifest: dict) -> None:
    """What was written: the bundle, its shortlist and the measured cost of reduced precision."""
    typer.echo(
        f"bundle {out}: {manifest['model_kind']}, {manifest['label_count']} labels, {len(manifest['files'])} files"
    )
    report = manifest.get("export", {})
    shortlist = report.get("shortlist")
    if shortlist:
        typer.echo(
            f"shortlist: skipped, {shortlist['skipped']}"
            if "skipped" in shortlist
            else f"shortlist: {shortlist['index']} FAISS index over {shortlist['nodes']} level-1 nodes, "
            f"recall {shortlist['recall']}"
        )
    if "chosen" in report:  # LaMP: the precision and C the bundle serves, and why (training/lamp/export.py)
        typer.echo(f"serves {report['chosen']}")
        return
    for precision in ("int8", "fp16"):
        cost = report.get(precision)
        if cost and "top5_agreement_vs_fp32" in cost:
            typer.echo(f"{precision}: top-5 agreement with the fp32 graph {cost['top5_agreement_vs_fp32']:.3f}")
