import json

from typer.testing import CliRunner

from xtag.cli import app

runner = CliRunner()


def test_train_export_evaluate_predict(corpus_files, tmp_path):
    train, test = corpus_files
    run, bundle = tmp_path / "run", tmp_path / "bundle"
    r = runner.invoke(
        app,
        [
            "train",
            "--corpus",
            str(train),
            "--model",
            "xlinear",
            "--out",
            str(run),
            "--max-leaf-size",
            "4",
            "--branching",
            "2",
            "--threads",
            "1",
            "--no-progress",
        ],
    )
    assert r.exit_code == 0, r.output
    assert (run / "config.json").exists() and (run / "model" / "manifest.json").exists() is False
    log = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    assert log[-1]["event"] == "done"

    r = runner.invoke(app, ["export", str(run), "--out", str(bundle)])
    assert r.exit_code == 0, r.output

    metrics_path = tmp_path / "metrics.json"
    r = runner.invoke(
        app, ["evaluate", str(bundle), "--corpus", str(test), "--json", str(metrics_path), "--no-progress"]
    )
    assert r.exit_code == 0, r.output
    assert "PSP" in r.output and "macro-F1" in r.output
    metrics = json.loads(metrics_path.read_text())
    assert metrics["P@1"] > 90 and set(metrics) >= {"P@1", "P@3", "P@5", "nDCG@5", "PSP@5", "coverage@5"}

    r = runner.invoke(app, ["predict", str(bundle), "email smtp imap inbox", "--k", "3"])
    assert r.exit_code == 0 and r.output.splitlines()[0].endswith("net::mail")

    preds = tmp_path / "preds.jsonl"
    r = runner.invoke(
        app, ["predict", str(bundle), "--corpus", str(test), "--k", "10", "--out", str(preds), "--no-progress"]
    )
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in preds.read_text().splitlines()]
    assert len(rows) == 120 and rows[0]["id"] == "doc0"
    scores = [label["score"] for label in rows[0]["labels"]]
    assert len(scores) == 10 and scores == sorted(scores, reverse=True)


def test_resume_needs_same_config_and_existing_runs_are_protected(corpus_files, tmp_path):
    args = [
        "train",
        "--corpus",
        str(corpus_files[0]),
        "--out",
        str(tmp_path / "run"),
        "--threads",
        "1",
        "--no-progress",
    ]
    assert runner.invoke(app, args).exit_code == 0
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "--resume" in r.output
    r = runner.invoke(app, args + ["--resume", "--C", "3"])
    assert r.exit_code == 2 and "different configuration" in r.output
    assert runner.invoke(app, args + ["--resume"]).exit_code == 0


def test_bad_corpus_and_bad_bundle_are_clear_errors(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok", "labels": ["a"]}\n{broken\n')
    r = runner.invoke(app, ["train", "--corpus", str(bad), "--out", str(tmp_path / "run")])
    assert r.exit_code == 2 and "bad.jsonl:2" in r.output
    r = runner.invoke(app, ["predict", str(tmp_path), "some text"])
    assert r.exit_code == 2 and "not an xtag bundle" in r.output


def test_print_config_round_trips(corpus_files, tmp_path):
    r = runner.invoke(app, ["train", "--corpus", str(corpus_files[0]), "--print-config", "--C", "2"])
    assert r.exit_code == 0
    config = json.loads(r.output)
    assert config["xlinear"]["C"] == 2.0
    path = tmp_path / "c.json"
    path.write_text(r.output)
    r2 = runner.invoke(app, ["train", "--config", str(path), "--print-config"])
    assert json.loads(r2.output) == config
