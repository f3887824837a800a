"""`xtag train`'s flags as data: the config setting each one writes.

The config dict is built in one order: --config's file, then the flags typed on the command line, then the
generic `--set section.field=value` overrides; pydantic validates the result. When it refuses a setting, the
same table names the setting as the user would fix it (`--C`, or `--set xlinear.tol`), never its dotted path.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, get_args

from xtag.models.errors import XtagError
from xtag.models.families import DEFAULT_KIND, FAMILIES, family

FLAG_PATHS: dict[str, str] = {  # flag -> the TrainConfig setting it writes
    "--corpus": "corpus",
    "--model": "model",
    "--format": "format",
    "--skip-bad-rows": "skip_bad_rows",
    "--labels": "labels",
    "--ray": "ray",
    "--beam-size": "xlinear.beam_size",
    "--negatives": "xlinear.negatives",
    "--loss": "xlinear.loss",  # propensity | unbiased-balanced: WEIGHTING instead
    "--C": "xlinear.C",
    "--threshold": "xlinear.threshold",
    "--threads": "xlinear.n_jobs",
    "--branching": "xlinear.tree.branching",
    "--max-leaf-size": "xlinear.tree.max_leaf_size",
    "--seed": "xlinear.tree.seed",  # and, for a transformer family, its training seed
    "--propensity-file": "missing_labels.propensity_file",
    "--dense": "dense.kind",  # `none` drops a config file's dense section instead
    "--dense-source": "dense.source",
    "--dense-tune": "dense.tune",
    "--dense-alpha": "dense.alpha",
}
RANKERS_SECTION = "xlinear."  # settings only families with "xlinear-rankers" read (--seed's tree seed aside)
DENSE_FLAGS = ("--dense", "--dense-source", "--dense-tune", "--dense-alpha")  # families with "static-dense" only
WEIGHTING = "missing_labels.weighting"  # where --loss puts the weighted (missing-label) losses
TRANSFORMER_FLAGS: dict[str, str] = {  # flag -> setting of the chosen transformer family's own section
    "--encoder": "encoder",
    "--max-length": "max_length",
    "--epochs": "epochs",
    "--batch-size": "batch_size",
    "--device": "device",
    "--seed": "seed",
}
FLAG_OF: dict[str, str] = {  # setting -> flag, for error messages
    **{path: flag for flag, path in FLAG_PATHS.items()},
    WEIGHTING: "--loss",
    **{
        f"{f.section}.{field}": flag
        for f in FAMILIES.values()
        if f.supports("transformer")
        for flag, field in TRANSFORMER_FLAGS.items()
    },
}


def config_dict(base: dict, given: dict[str, Any], overrides: Iterable[str]) -> dict:
    """`base` (the --config file's dict) with the `given` flags ({flag: value}, only those typed) and the
    --set `overrides` written in, not yet validated."""
    from xtag.training.weighting.label_weights import WEIGHTED_LOSSES

    given = {flag: str(v) if isinstance(v, Path) else v for flag, v in given.items()}
    if "--loss" in given:
        _check_loss(given["--loss"], WEIGHTED_LOSSES)
    if "--model" in given:
        base["model"] = given["--model"]
    chosen = family(base.setdefault("model", DEFAULT_KIND))
    for flag in DENSE_FLAGS:
        if flag in given and given.get("--dense") != "none":
            chosen.require("static-dense", flag)
    for flag, value in given.items():
        if flag == "--dense" and value == "none":
            base["dense"] = None
            _check_no_dense_settings(given)
        elif flag in FLAG_PATHS:
            weighted = flag == "--loss" and value in WEIGHTED_LOSSES
            path = WEIGHTING if weighted else FLAG_PATHS[flag]
            if path.startswith(RANKERS_SECTION) and flag != "--seed":
                chosen.require("xlinear-rankers", flag)
            set_path(base, path, value, flag)
        if flag in TRANSFORMER_FLAGS and chosen.supports("transformer"):
            set_path(base, f"{chosen.section}.{TRANSFORMER_FLAGS[flag]}", value, flag)
        elif flag in TRANSFORMER_FLAGS and flag not in FLAG_PATHS:  # --seed also seeds every family's tree
            chosen.require("transformer", flag)
    for option in overrides:
        path, value = parse_override(option)
        if path.startswith(RANKERS_SECTION) and path != FLAG_PATHS["--seed"]:
            chosen.require("xlinear-rankers", f"--set {path}")
        set_path(base, path, value, f"--set {option}")
    return base


def _check_no_dense_settings(given: dict[str, Any]) -> None:
    """--dense none removes the block, so a --dense-* setting beside it would be silently dropped: refuse it."""
    for flag in DENSE_FLAGS[1:]:
        if flag in given:
            raise XtagError(f"{flag}: sets the static block, which --dense none removes")


def _check_loss(value: str, weighted: tuple[str, ...]) -> None:
    """--loss writes one of two settings, so pydantic would list only one setting's values: list them all."""
    losses = (*get_args(family("xlinear").resolve("config").model_fields["loss"].annotation), *weighted)
    if value not in losses:
        raise XtagError(f"--loss {value}: expected {' | '.join(losses)}")


def parse_override(option: str) -> tuple[str, Any]:
    """`section.field=value` -> (dotted path, value); the value is JSON when it parses as JSON, else the text."""
    path, equals, text = option.partition("=")
    if not equals or not all(part.strip() for part in path.split(".")):
        raise XtagError(f"--set {option}: expected section.field=value (e.g. --set xlinear.C=2)")
    try:
        return path, json.loads(text)
    except ValueError:
        return path, text


def set_path(config: dict, path: str, value: Any, option: str) -> None:
    """config[a][b][c] = value for path "a.b.c", creating the sections on the way."""
    *sections, field = path.split(".")
    node = config
    for depth, key in enumerate(sections):
        if node.get(key) is None:
            node[key] = {}
        node = node[key]
        if not isinstance(node, dict):
            raise XtagError(f"{option}: {'.'.join(sections[: depth + 1])} is a setting, not a section")
    node[field] = value


def option_name(path: str, overrides: Iterable[str] = ()) -> str:
    """How the user sets the config setting `path`: the --set they gave for it (or inside it), else its flag,
    else the --set that would."""
    for option in overrides:
        given = option.partition("=")[0]
        if given == path or given.startswith(path + "."):
            return f"--set {given}"
    return FLAG_OF.get(path, f"--set {path}")
