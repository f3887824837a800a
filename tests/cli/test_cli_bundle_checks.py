"""The CLI loads bundles through the one load path the server uses (issue 38): a bundle with NaN weights or an
out-of-range vocabulary column is refused by `xtag predict` and `xtag evaluate` in one line with a non-zero
exit (they answered with changed rankings and rc 0, or a traceback), and a training run given where a bundle
belongs, or a run folder that does not exist, is named for what it is."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.conftest import edit_bundle
from xtag.cli import app

runner = CliRunner()


def one_error_line(result) -> str:
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


@pytest.fixture(scope="module")
def nan_bundle(tiny_bundle, tmp_path_factory):
    """NaN in a third of the engine's biases: before, predictions ran and P@1 fell to 0 with rc 0."""
    folder = shutil.copytree(tiny_bundle, tmp_path_factory.mktemp("nan") / "b")

    def poison(bias: np.ndarray) -> np.ndarray:
        bias = bias.copy()
        bias[::3] = np.nan
        return bias

    return edit_bundle(folder, "rankers/engine/bias.npy", poison)


@pytest.fixture(scope="module")
def column_bundle(tiny_bundle, tmp_path_factory):
    """The issue's bundle: one vocabulary column set to 50,000,000, re-hashed (predict printed a traceback)."""
    folder = shutil.copytree(tiny_bundle, tmp_path_factory.mktemp("column") / "b")
    return edit_bundle(folder, "features/tfidf/vocabulary.json", lambda vocab: vocab | {"python": 50_000_000})


def test_predict_and_evaluate_refuse_a_bundle_with_nan_in_one_line(nan_bundle, corpus_files):
    for args in (
        ["predict", str(nan_bundle), "python script"],
        ["evaluate", str(nan_bundle), "--corpus", str(corpus_files[1])],
    ):
        line = one_error_line(runner.invoke(app, [*args, "--no-progress"] if args[0] == "evaluate" else args))
        assert "non-finite values (NaN or inf) in rankers/engine/bias.npy" in line, line


def test_predict_and_evaluate_refuse_an_out_of_range_vocabulary_column(column_bundle, corpus_files):
    for args in (
        ["predict", str(column_bundle), "python script"],
        ["evaluate", str(column_bundle), "--corpus", str(corpus_files[1])],
    ):
        line = one_error_line(runner.invoke(app, args))
        assert "vocabulary.json: term 'python' has column 50000000" in line, line


def test_predict_on_a_training_run_says_to_export_it(tiny_bundle):
    run = tiny_bundle.parent / "run"  # the fixture's run, which its bundle was exported from
    line = one_error_line(runner.invoke(app, ["predict", str(run), "python script"]))
    assert "a training run, not a bundle" in line and f"xtag export {run} --out" in line, line


def test_export_of_a_missing_run_says_it_does_not_exist(tmp_path):
    line = one_error_line(runner.invoke(app, ["export", str(tmp_path / "nope"), "--out", str(tmp_path / "b")]))
    assert "no such run directory" in line and "no finished model" not in line, line
