"""The `xtag` command line (the console script and `python -m xtag`): one module per command group.

data.py (corpora), train.py (+ train_flags.py, flags as config settings), export.py, update.py (labels added to
a run), feedback.py (the service's feedback store), shadow.py (shadow scoring's report), rollout.py (a served
model's versions: traffic, promote, rollback), evaluate.py (evaluate, calibrate), predict.py, serve.py and warm.py (the Numba cache); options.py holds what they share. Each command imports its heavy code when
it runs, so `xtag --help` imports no torch, and predict/evaluate/calibrate import no training code but the
corpus reader.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
import typer.rich_utils

from xtag.cli import data, evaluate, export, feedback, predict, rollout, serve, shadow, train, update, warm
from xtag.cli.options import show_version
from xtag.config.settings import help_width_given

# Without a terminal (a pipe, a file, CI logs) rich lays help out in 80 columns, which cuts option names
# ("--no-skip-bad-…") and squeezes their descriptions; there is no screen to fit, so lay it out wide.
# TERMINAL_WIDTH or COLUMNS, when set, still win.
HELP_WIDTH_WITHOUT_TTY = 160
if typer.rich_utils.MAX_WIDTH is None and not help_width_given() and not sys.stdout.isatty():
    typer.rich_utils.MAX_WIDTH = HELP_WIDTH_WITHOUT_TTY

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
app.add_typer(feedback.app, name="feedback")
app.add_typer(shadow.app, name="shadow")
app.add_typer(rollout.app, name="rollout")
app.command()(train.train)
app.command()(export.export)
app.command()(update.update)
app.command()(evaluate.evaluate)
app.command()(evaluate.calibrate)
app.command()(predict.predict)
app.command()(serve.serve)
app.command()(warm.warm)
