"""The `xtag` command line (the console script and `python -m xtag`): one module per command group.

data.py (corpora), train.py (+ train_flags.py, flags as config settings), export.py, evaluate.py (evaluate,
calibrate), predict.py, serve.py and warm.py (the Numba cache); options.py holds what they share. Each command imports its heavy code when
it runs, so `xtag --help` imports no torch, and predict/evaluate/calibrate import no training code but the
corpus reader.
"""

from __future__ import annotations

from typing import Annotated

import typer

from xtag.cli import data, evaluate, export, predict, serve, train, warm
from xtag.cli.options import show_version

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Extreme multi-label tagging: train, export, evaluate, predict and serve.",
)


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=show_version, is_eager=True, help="print the version and exit")
    ] = False,
) -> None:
    """Extreme multi-label tagging: train, export, evaluate, predict and serve."""


app.add_typer(data.app, name="data")
app.command()(train.train)
app.command()(export.export)
app.command()(evaluate.evaluate)
app.command()(evaluate.calibrate)
app.command()(predict.predict)
app.command()(serve.serve)
app.command()(warm.warm)
