"""`xtag data debtags | debdeps | drop-labels`: build the benchmark corpora (numpy-only, no training)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from xtag.cli.options import PropensityA, PropensityB, echo_json, failing, finish
from xtag.models.propensity import DEFAULT_A, DEFAULT_B

app = typer.Typer(no_args_is_help=True, help="Build benchmark corpora.")

Out = Annotated[Path, typer.Option(help="folder for train.jsonl.gz and test.jsonl.gz")]
Lists = Annotated[Path, typer.Option(help="apt lists folder")]
Update = Annotated[
    bool, typer.Option(help="run `apt-get update -o Acquire::Languages=en` first (as root only; others: --lists DIR)")
]
APT_LISTS = Path("/var/lib/apt/lists")


def _build_apt_corpus(build: Callable[[Path, Path], dict], lists: Path, out: Path, update: bool) -> None:
    from xtag.training.data.apt_corpus import update_apt_lists

    with failing():
        if update:
            update_apt_lists()
        echo_json(build(lists, out))
    finish(f"wrote {out}/train.jsonl.gz and {out}/test.jsonl.gz", f"xtag train --corpus {out}/train.jsonl.gz --out RUN")


@app.command("debtags")
def debtags(out: Out, lists: Lists = APT_LISTS, update: Update = False) -> None:
    """Rebuild the debtags corpus from a Debian machine's apt lists (Packages ⨝ Translation-en)."""
    from xtag.training.data.debtags import build_debtags_corpus

    _build_apt_corpus(build_debtags_corpus, lists, out, update)


@app.command("debdeps")
def debdeps(out: Out, lists: Lists = APT_LISTS, update: Update = False) -> None:
    """Rebuild the debdeps corpus (labels: Depends, Pre-Depends, Recommends) from the apt lists, like debtags."""
    from xtag.training.data.debdeps import build_debdeps_corpus

    _build_apt_corpus(build_debdeps_corpus, lists, out, update)


@app.command("drop-labels")
def drop_labels(
    data: Annotated[Path, typer.Option(help="corpus folder with train.jsonl.gz and test.jsonl.gz")],
    out: Annotated[Path, typer.Option(help="folder for the corrupted train, the copied test and propensities.json")],
    seed: Annotated[int, typer.Option(help="random seed of the drops")] = 0,
    propensity_a: PropensityA = DEFAULT_A,
    propensity_b: PropensityB = DEFAULT_B,
    scale: Annotated[float, typer.Option(help="multiply every propensity (≤ 1) for harsher corruption")] = 1.0,
) -> None:
    """Missing labels with known propensities: drop each training positive of label j with probability 1 − p_j.

    The test split is copied untouched, so models trained on the result are measured against complete labels;
    out/propensities.json holds the true p_j (usable as missing_labels.propensity_file)."""
    from xtag.training.data.drop_labels import drop_labels

    with failing():
        echo_json(drop_labels(data, out, seed, propensity_a, propensity_b, scale))
    finish(
        f"wrote {out}/train.jsonl.gz, test.jsonl.gz and propensities.json",
        f"xtag train --corpus {out}/train.jsonl.gz --loss propensity --propensity-file {out}/propensities.json --out RUN",
    )
