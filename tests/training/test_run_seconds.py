"""A resumed run's summary keeps what training took (issue 47): main.sh resumes a finished run on every rerun, which
reuses each checkpoint in seconds, and LaMP's cross-fitting estimate (training/lamp/cross_fit.py) then read that
resume's 13 s where the model had trained in 55 s. `train_seconds` counts the attempts a resume builds on."""

from __future__ import annotations

import json

import pytest
from xtag.models.features.tfidf import TfidfConfig
from xtag.training.config import TrainConfig
from xtag.training.run import train_run
from xtag.training.tree.build import TreeConfig
from xtag.training.xlinear.config import XLinearConfig


@pytest.fixture
def config(corpus_files) -> TrainConfig:
    return TrainConfig(
        corpus=corpus_files[0],
        tfidf=TfidfConfig(min_df=1),
        xlinear=XLinearConfig(n_jobs=1, tree=TreeConfig(branching=2, max_leaf_size=4)),
    )


def summary(run) -> dict:
    return json.loads((run / "summary.json").read_text())


def test_resuming_a_finished_run_keeps_its_training_time(config, tmp_path):
    run = tmp_path / "run"
    first = train_run(config, run, progress=False)
    assert first["train_seconds"] == first["total_seconds"]
    trained = dict(first, train_seconds=1234.5)  # as if it had trained for 20 minutes
    (run / "summary.json").write_text(json.dumps(trained))
    again = train_run(config, run, resume=True, progress=False)
    assert again["train_seconds"] == summary(run)["train_seconds"] == 1234.5
    assert again["total_seconds"] < 1234.5  # this attempt's own time, as before


def test_resuming_a_killed_run_adds_the_killed_attempts_time(config, tmp_path):
    run = tmp_path / "run"
    train_run(config, run, progress=False)
    (run / "summary.json").unlink()  # as if killed after its last checkpoint
    events = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    killed = events[-1]["time"] - next(e["time"] for e in events if e["event"] == "corpus")
    with open(run / "train_log.jsonl", "a") as log:
        log.write('{"time": 17')  # the kill cut the last line short
    again = train_run(config, run, resume=True, progress=False)
    assert again["train_seconds"] == pytest.approx(killed + again["total_seconds"], abs=0.01)
    assert again["train_seconds"] > again["total_seconds"]
