import csv
import json

import numpy as np
import pytest
import scipy.sparse as sp
from typer.testing import CliRunner
from xtag.models.metrics import bucket_metrics, evaluate, frequency_buckets, per_label_metrics

from xtag.cli import app

PNG = b"\x89PNG\r\n\x1a\n"


def test_frequency_buckets_by_cumulative_mass():
    # total 100; sorted 50 (starts at 0 → head), 30 (starts at .5 → torso), 10 (.8 → tail), 5, 5, unseen → tail
    f = np.array([5, 30, 0, 50, 10, 5])
    assert frequency_buckets(f).tolist() == [2, 1, 2, 0, 2, 2]
    assert frequency_buckets(np.array([1, 1, 1, 1, 1])).tolist() == [0, 0, 0, 1, 2]  # starts 0, .2, .4, .6, .8


def test_bucket_and_per_label_metrics_agree_with_the_macro_metrics():
    rng = np.random.default_rng(0)
    Y = sp.csr_matrix((rng.random((200, 30)) < 0.1).astype(np.float32))
    pred = np.argsort(-rng.random((200, 30)), axis=1)[:, :5]
    pred[0, 4] = -1
    m = evaluate(pred, Y, (5,))
    c = per_label_metrics(pred, Y, 5)
    assert 100 * c["f1"].mean() == pytest.approx(m["macro-F1@5"]) and 100 * c["recall"].mean() == pytest.approx(
        m["macro-R@5"]
    )
    buckets = frequency_buckets(rng.integers(1, 100, 30))
    b = bucket_metrics(pred, Y, 5, buckets)
    assert sum(row["labels"] for row in b.values()) == 30
    weighted = sum(row["labels"] * row["macro-F1@5"] for row in b.values()) / 30
    assert weighted == pytest.approx(m["macro-F1@5"])
    assert sum(row["tp"] for row in b.values()) == c["tp"].sum()


def test_evaluate_writes_per_label_csv_plots_json_and_optimised_metrics(tiny_bundle, corpus_files, tmp_path):
    runner = CliRunner()
    out = tmp_path / "report"
    r = runner.invoke(
        app,
        [
            "evaluate",
            str(tiny_bundle),
            "--corpus",
            str(corpus_files[1]),
            "--no-progress",
            "--at-10",
            "--per-label",
            str(out / "labels.csv"),
            "--plots",
            str(out / "plots"),
            "--optimize",
            "macro-f1",
            "--optimize-alpha",
            "0.5",
            "--optimize-method",
            "fw",
            "--json",
            str(out / "m.json"),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "@10" in r.output and "tail" in r.output and "optimised (fw, macro-f1" in r.output and "ECE@5" in r.output
    with open(out / "labels.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == [
        "label",
        "train_frequency",
        "bucket",
        "support",
        "predicted",
        "tp",
        "precision",
        "recall",
        "f1",
        "opt_predicted",
        "opt_tp",
        "opt_precision",
        "opt_recall",
        "opt_f1",
    ]
    assert len(rows) == 12 and {row["bucket"] for row in rows} == {"head", "torso", "tail"}
    tail = next(row for row in rows if row["label"] == "role::tail")
    assert tail["bucket"] == "tail" and int(tail["support"]) == 8
    for name in ("buckets.png", "tradeoff.png"):
        assert (out / "plots" / name).read_bytes()[:8] == PNG
    metrics = json.loads((out / "m.json").read_text())
    assert {"P@10", "macro-F1@10", "tail/macro-F1@5", "ECE@5", "optimized/macro-F1@5", "optimized/P@10"} <= set(metrics)
    assert metrics["optimized/macro-F1@5"] > metrics["macro-F1@5"]


def test_evaluate_optimize_flags_are_checked(tiny_bundle, corpus_files):
    runner = CliRunner()
    base = ["evaluate", str(tiny_bundle), "--corpus", str(corpus_files[1]), "--no-progress"]
    r = runner.invoke(app, base + ["--optimize", "macro-recall", "--optimize-method", "bca", "--ks", "1,5"])
    assert r.exit_code == 0, r.output
    assert "optimised (bca, macro-recall" in r.output
    assert runner.invoke(app, base + ["--optimize", "micro-f1"]).exit_code == 2
    assert runner.invoke(app, base + ["--optimize", "macro-f1", "--optimize-alpha", "1.5"]).exit_code == 2
