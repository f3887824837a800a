"""`xtag update`: add the labels of a new corpus to a trained run, retraining only the rankers that change."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from xtag.cli.options import CorpusFormat, Progress, echo_json, failing, finish
from xtag.models.errors import XtagError
from xtag.models.families import UpdatePlacement

Opt = typer.Option


def update(
    run: Annotated[Path, typer.Argument(help="run directory written by `xtag train` (or by an earlier update)")],
    out: Annotated[Path, Opt(help="new run directory to write (RUN is left as it is)")],
    corpus: Annotated[
        Path | None, Opt(help="new labelled documents (e.g. `xtag feedback export`); same ids replace rows")
    ] = None,
    labels: Annotated[
        Path | None,
        Opt(
            help="without --corpus: a label file whose new labels are added from their text alone (a run trained "
            "with --labels and the label-text stage)"
        ),
    ] = None,
    format: CorpusFormat = "auto",
    clusters: Annotated[
        UpdatePlacement,
        Opt(
            help="where new labels go: new = clusters of their own under the root (only new rankers trained); "
            "refit = the nearest old cluster, its and its ancestors' rankers retrained; keep = the nearest old "
            "cluster, its rankers kept"
        ),
    ] = "new",
    progress: Progress = True,
) -> None:
    """Add labels without a full retrain: the new labels get a label tree of their own beside the old one (or join the
    nearest old clusters, by PIFA: --clusters refit|keep); only new or changed rankers are trained, every other is
    copied, so old labels keep their scores. Writes a normal run for `xtag export`.

    XR-Linear and XR-Transformer runs. An XR-Transformer run keeps its fine-tuned encoder as it is (re-tuning it
    would move every document's embedding and so retrain every ranker); only rows the run has no embedding for
    are encoded. For a re-tuned encoder, retrain: `xtag train --config RUN2/config.json --out RUN3`.

    With --labels and no --corpus, a run trained with the label-text stage (xtag train --labels) gets the file's new
    labels from their text alone, in seconds: appended to its vocabulary and its label index, every other label
    as it was."""
    from xtag.training.update_run import update_labels, update_run  # imported here: `xtag --help` stays fast

    with failing(OSError):
        if corpus is None and labels is None:
            raise XtagError("give --corpus (new documents) or --labels (new labels from their text alone)")
        if corpus is None:
            summary = update_labels(run, labels, out)
        else:
            summary = update_run(run, corpus, out, format, progress, clusters=clusters)
    echo_json(summary)
    finish(f"wrote run {out}", f"xtag export {out} --out BUNDLE, then reload the service")
