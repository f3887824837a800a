"""The command line's own options (issue 23): --set overrides, --version, and config errors in one line that
names the option to fix."""

import json
from importlib.metadata import version

import pytest
import typer
from typer.testing import CliRunner

from xtag.cli import app
from xtag.cli.train_flags import FLAG_PATHS, TRANSFORMER_FLAGS

runner = CliRunner()


def _config(*args: str) -> dict:
    r = runner.invoke(app, ["train", "--print-config", *args])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def _error(*args: str) -> str:
    """The error a command prints: exactly one line, no pydantic dump, no URL; exit status 2."""
    r = runner.invoke(app, list(args))
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "http" not in r.output and "validation error" not in r.output, r.output
    return lines[0]


def test_set_writes_nested_settings_with_json_or_text_values():
    config = _config(
        *("--set", "xlinear.tree.branching=3"),  # JSON number, two sections deep
        *("--set", "missing_labels.beta=0.9"),
        *("--set", "xlinear.negatives=tfn+man"),  # not JSON: taken as text
        *("--set", "xlinear.man_k=null"),  # JSON null, which the text "null" would not be
    )
    assert config["xlinear"]["tree"]["branching"] == 3 and config["missing_labels"]["beta"] == 0.9
    assert config["xlinear"]["negatives"] == "tfn+man" and config["xlinear"]["man_k"] is None
    assert _config("--model", "lightxml", "--set", "lightxml.top_clusters=5")["lightxml"]["top_clusters"] == 5
    cascade = _config("--model", "cascadexml", "--set", "cascadexml.loss_weights=[1, 0.5]")
    assert cascade["cascadexml"]["loss_weights"] == [1.0, 0.5]


def test_set_comes_after_the_config_file_and_the_flags(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"xlinear": {"C": 4.0, "tol": 0.5}, "model": "lightxml"}))
    config = _config("--config", str(path), "--model", "xlinear", "--C", "3", "--set", "xlinear.C=2")
    assert config["xlinear"]["C"] == 2.0 and config["xlinear"]["tol"] == 0.5  # the file's other settings stay
    assert config["model"] == "xlinear"  # a typed flag wins over the file
    assert _config("--config", str(path))["model"] == "lightxml"  # an untyped flag's default does not


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--C", "-1"], "error: --C: Input should be greater than 0"),
        (["--max-leaf-size", "0"], "error: --max-leaf-size: Input should be greater than or equal to 1"),
        (["--model", "lightxml", "--epochs", "0"], "error: --epochs: Input should be greater than or equal to 1"),
        (
            ["--loss", "hinge"],
            "error: --loss hinge: expected squared-hinge | logistic | propensity | unbiased-balanced",
        ),
        (["--set", "xlinear.tol=-1"], "error: --set xlinear.tol: Input should be greater than 0"),
        (["--C", "-1", "--set", "xlinear.C=-2"], "error: --set xlinear.C: Input should be greater than 0"),
        (["--set", "xlinear.nosuch=1"], "error: --set xlinear.nosuch: no such setting"),
        (["--set", "nosuch.field=1"], "error: --set nosuch.field: no such setting"),
        (["--C", "3", "--set", "xlinear.C.x=1"], "error: --set xlinear.C.x=1: xlinear.C is a setting, not a section"),
        (["--set", "xlinear.C.x=1"], "error: --set xlinear.C.x: Input should be a valid number"),
        (["--set", "xlinear.C"], "error: --set xlinear.C: expected section.field=value (e.g. --set xlinear.C=2)"),
    ],
)
def test_a_refused_setting_is_one_line_naming_the_option(corpus_files, args, expected):
    assert _error("train", "--corpus", str(corpus_files[0]), "--print-config", *args) == expected


def test_evaluate_names_its_flag_too(tiny_bundle, corpus_files):
    args = ["evaluate", str(tiny_bundle), "--corpus", str(corpus_files[1]), "--optimize", "macro-f1"]
    line = _error(*args, "--optimize-alpha", "1.5", "--no-progress")
    assert line == "error: --optimize-alpha: Input should be less than or equal to 1"


def test_version_prints_the_installed_version():
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and r.output == f"xtag {version('xtag')}\n"


def test_every_flag_of_the_table_is_an_option_of_train():
    train = typer.main.get_command(app).commands["train"]
    options = {opt for param in train.params for opt in param.opts}
    assert set(FLAG_PATHS) | set(TRANSFORMER_FLAGS) <= options


def test_the_dense_flags_reach_the_config_and_families_without_it_refuse_them(corpus_files, tmp_path):
    dense = _config(
        "--dense", "static", "--dense-source", str(tmp_path), "--dense-tune", "task", "--dense-alpha", "0.3"
    )
    assert dense["dense"]["kind"] == "static" and dense["dense"]["source"] == str(tmp_path)
    assert dense["dense"]["tune"] == "task" and dense["dense"]["alpha"] == 0.3
    assert _config("--dense-tune", "corpus")["dense"]["tune"] == "corpus"  # a --dense-* setting implies the block
    assert _config("--set", "dense.task_epochs=2")["dense"]["task_epochs"] == 2
    assert _config()["dense"] is None
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"dense": {"tune": "corpus"}}))
    assert _config("--config", str(path), "--dense", "none")["dense"] is None  # drops the file's block
    corpus = ("train", "--corpus", str(corpus_files[0]), "--print-config")
    supported = "does not support a static token-embedding block in Φ_cat (--dense static, the `dense` section) "
    for flag, value in (("--dense", "static"), ("--dense-tune", "task"), ("--dense-alpha", "0.3")):
        line = _error(*corpus, "--model", "lightxml", flag, value)
        assert line == f"error: {flag}: model lightxml {supported}(supported by xlinear)"
    assert _error(*corpus, "--dense-tune", "best").startswith("error: --dense-tune: Input should be 'none'")
    assert _error(*corpus, "--dense", "none", "--dense-tune", "task") == (
        "error: --dense-tune: sets the static block, which --dense none removes"
    )


XLINEAR_FLAGS = [f for f, path in FLAG_PATHS.items() if path.startswith("xlinear.") and f != "--seed"]


@pytest.mark.parametrize("kind", ["lightxml", "cascadexml", "lamp"])
def test_the_rankers_flags_are_refused_by_families_that_do_not_read_them(corpus_files, kind):
    """`--model cascadexml --C 3` used to exit 0 and store xlinear.C=3, which nothing reads."""
    corpus = ("train", "--corpus", str(corpus_files[0]), "--print-config", "--model", kind)
    values = {"--negatives": "man", "--loss": "logistic"}
    rankers = "does not support the XR-Linear rankers and their label tree (the `xlinear` settings)"
    for flag in XLINEAR_FLAGS:
        line = _error(*corpus, flag, values.get(flag, "3"))
        assert line == f"error: {flag}: model {kind} {rankers} (supported by xlinear, xr-transformer)"
    assert _error(*corpus, "--set", "xlinear.tol=0.1").startswith("error: --set xlinear.tol: model ")
    assert _config(*corpus[1:], "--seed", "5")[kind]["seed"] == 5  # --seed: the family's own seed too
    if kind != "lamp":  # --loss's weighted losses are the missing_labels section, which these two read
        assert _config(*corpus[1:], "--loss", "propensity")["missing_labels"]["weighting"] == "propensity"


def test_the_rankers_flags_reach_the_families_that_read_them(corpus_files):
    corpus = ("--corpus", str(corpus_files[0]))
    for kind in ("xlinear", "xr-transformer"):
        config = _config(*corpus, "--model", kind, "--C", "3", "--loss", "logistic", "--branching", "4")
        assert (config["xlinear"]["C"], config["xlinear"]["loss"], config["xlinear"]["tree"]["branching"]) == (
            3.0,
            "logistic",
            4,
        )
