"""`xtag update`: add the labels of a new corpus to a trained run, retraining only the rankers that change."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from xtag.cli.options import CorpusFormat, Progress, echo_json, failing, finish

Opt = typer.Option


def update(
    run: Annotated[Path, typer.Argument(help="run directory written by `xtag train` (or by an earlier update)")],
    corpus: Annotated[Path, Opt(help="new labelled documents (e.g. `xtag feedback export`); same ids replace rows")],
    out: Annotated[Path, Opt(help="new run directory to write (RUN is left as it is)")],
    format: CorpusFormat = "auto",
    refit_clusters: Annotated[
        bool,
        Opt(
            "--refit-clusters/--keep-clusters",
            help="retrain the rankers of clusters that gained labels and their ancestors (--keep-clusters: cheaper)",
        ),
    ] = True,
    progress: Progress = True,
) -> None:
    """Add labels without a full retrain: new labels join the nearest leaf clusters (by PIFA), only changed rankers
    are retrained, the rest copied. Writes a normal run for `xtag export`.

    XR-Linear and XR-Transformer runs. An XR-Transformer run keeps its fine-tuned encoder as it is (re-tuning it
    would move every document's embedding and so retrain every ranker); only rows the run has no embedding for
    are encoded. For a re-tuned encoder, retrain: `xtag train --config RUN2/config.json --out RUN3`."""
    from xtag.training.update_run import update_run

    with failing(OSError):
        summary = update_run(run, corpus, out, format, progress, refit_clusters=refit_clusters)
    echo_json(summary)
    finish(f"wrote run {out}", f"xtag export {out} --out BUNDLE, then reload the service")
