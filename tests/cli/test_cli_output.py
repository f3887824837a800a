"""What the commands tell a user: endings with the next command, warnings, skipped lines, readable scores,
ties, described options and help that is not cut without a terminal."""

import json
import logging

import click
import typer
from typer.testing import CliRunner

from tests.conftest import make_rows, write_jsonl
from xtag.cli import app
from xtag.cli.options import echo_log
from xtag.cli.predict import score_texts

runner = CliRunner()
TRAIN = ["--max-leaf-size", "4", "--branching", "2", "--threads", "1", "--no-progress"]


def _train(corpus, run, *extra):
    return runner.invoke(app, ["train", "--corpus", str(corpus), "--out", str(run), *TRAIN, *extra])


def test_train_and_export_end_with_what_they_wrote_and_the_next_command(corpus_files, tmp_path):
    run, bundle = tmp_path / "run", tmp_path / "bundle"
    r = _train(corpus_files[0], run)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert (
        lines[-1]
        == f"wrote run {run} (model/, checkpoints/, config.json, summary.json, train_log.jsonl); next: xtag export {run} --out BUNDLE"
    )
    assert json.loads(lines[-2])["documents"] == 400  # the summary line scripts read stays on stdout
    # 400 documents: the small-data warning is a line to read, and it is in the run's log too
    assert any(line.startswith("warning: only 400 training documents") for line in lines)
    log = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    assert any(e["event"] == "warning" and "400 training documents" in e["message"] for e in log)

    r = runner.invoke(app, ["export", str(run), "--out", str(bundle)])
    assert r.exit_code == 0, r.output
    assert (
        r.output.splitlines()[-1]
        == f"wrote bundle {bundle}; next: xtag serve {bundle}  (or: xtag evaluate {bundle} --corpus TEST)"
    )


def test_a_failed_train_leaves_no_run_behind(tmp_path):
    corpus = write_jsonl(tmp_path / "bad.jsonl", make_rows(30) + [{"text": "", "labels": ["a"]}])
    run = tmp_path / "run"
    r = _train(corpus, run)
    assert r.exit_code == 2 and "bad.jsonl:31: no text" in r.output
    assert not run.exists()  # no config.json that a later --resume (scripts/main.sh) would take for a run
    run.mkdir()
    (run / "notes.txt").write_text("mine")
    assert _train(corpus, run).exit_code == 2
    assert sorted(p.name for p in run.iterdir()) == ["notes.txt"]  # what was there before stays


def test_skip_bad_rows_names_the_lines_it_skipped(tiny_bundle, tmp_path):
    rows = make_rows(60)
    rows[3] = {"text": "", "labels": ["x"]}
    rows[10] = {"text": "fine", "labels": "not a list"}
    corpus = write_jsonl(tmp_path / "c.jsonl", rows)
    said = "skipped 2 malformed rows: line 4 (no text), line 11 (labels must be a list"
    r = _train(corpus, tmp_path / "run", "--skip-bad-rows")
    assert r.exit_code == 0 and said in r.output, r.output
    r = runner.invoke(app, ["evaluate", str(tiny_bundle), "--corpus", str(corpus), "--skip-bad-rows", "--no-progress"])
    assert r.exit_code == 0 and said in r.output, r.output


def test_evaluate_counts_words_right_and_shows_empty_buckets_as_na(corpus_files, tiny_bundle, tmp_path):
    rows = [r for r in make_rows(120, seed=2)][:20]
    rows[0] = {**rows[0], "labels": rows[0]["labels"] + ["never::seen"]}
    test = write_jsonl(tmp_path / "test.jsonl", rows)
    metrics = tmp_path / "m.json"
    r = runner.invoke(
        app, ["evaluate", str(tiny_bundle), "--corpus", str(test), "--json", str(metrics), "--no-progress"]
    )
    assert r.exit_code == 0, r.output
    assert "(20 documents; 1 mention of 1 label unknown to the model, counted as misses)" in r.output
    assert r.output.splitlines()[-1] == (
        f"evaluated {tiny_bundle} on 20 documents; wrote {metrics}; next: xtag serve {tiny_bundle}"
    )
    rows_out = [line for line in r.output.splitlines() if line.split()[:1] in (["head"], ["torso"], ["tail"])]
    assert len({len(line) for line in rows_out}) == 1  # columns line up
    one_label = write_jsonl(tmp_path / "one.jsonl", [{"text": "email smtp imap", "labels": ["net::mail"]}])
    r = runner.invoke(app, ["evaluate", str(tiny_bundle), "--corpus", str(one_label), "--no-progress"])
    # torso and tail have predictions (micro-P 0.00 is measured) but no test mention: recall and macro are n/a
    empty = [line.split() for line in r.output.splitlines() if line.split()[:1] in (["torso"], ["tail"])]
    assert len(empty) == 2 and all(cells[2:] == ["0.00"] + ["n/a"] * 4 for cells in empty)


def test_predict_shows_what_it_ranked_by(tiny_bundle, tmp_path):
    r = runner.invoke(app, ["predict", str(tiny_bundle), "email smtp imap inbox", "--k", "5"])
    scores = [float(line.split()[0].rstrip("=")) for line in r.output.splitlines() if not line.startswith("(")]
    assert scores == sorted(scores, reverse=True) and max(scores) < 1.0
    r = runner.invoke(app, ["predict", str(tiny_bundle), "email smtp", "--k", "5", "--reweight", "psp", "--alpha", "1"])
    assert r.exit_code == 0, r.output
    header, *rows = r.output.splitlines()
    assert header.startswith("gain") and "ranked by gain" in header
    gains = [float(row.split()[0].rstrip("=")) for row in rows if not row.startswith("(")]
    assert gains == sorted(gains, reverse=True)
    out = tmp_path / "p.jsonl"
    texts = write_jsonl(tmp_path / "t.jsonl", make_rows(5, seed=3))
    args = ["predict", str(tiny_bundle), "--corpus", str(texts), "--out", str(out), "--no-progress"]
    r = runner.invoke(app, args + ["--reweight", "psp", "--alpha", "1"])
    assert r.output.splitlines()[-1] == f"wrote {out}: top-10 labels of each of 5 documents, as JSON lines"
    for row in map(json.loads, out.read_text().splitlines()):
        gains = [label["gain"] for label in row["labels"]]
        assert gains == sorted(gains, reverse=True)


def test_ties_are_marked_and_near_ties_get_more_decimals():
    assert score_texts([0.9, 0.86348632, 0.86348601, 0.86348601, 0.5]) == [
        "0.9000",
        "0.8634863",
        "0.8634860",
        "0.8634860=",
        "0.5000",
    ]


def test_every_option_says_what_it_does():
    def commands(cmd, path):
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                yield from commands(sub, f"{path} {name}")
        else:
            yield path, cmd

    silent = [
        f"{path} {param.opts[0]}"
        for path, cmd in commands(typer.main.get_command(app), "xtag")
        for param in cmd.params
        if isinstance(param, click.Option) and not (param.help or "").strip()
    ]
    assert silent == []


def test_help_is_full_width_without_a_terminal():
    r = runner.invoke(app, ["train", "--help"])
    assert "--no-skip-bad-rows" in r.output and "…" not in r.output  # nothing cut
    corpus = next(line for line in r.output.splitlines() if "--corpus " in line)
    out = next(line for line in r.output.splitlines() if "--out " in line)
    assert "(required, or in --config)" in corpus and "(required, except with --print-config)" in out


def test_step_logs_print_once_even_when_a_library_configured_the_root_logger(capsys):
    root = logging.getLogger()
    handler = logging.StreamHandler()  # what logging.basicConfig installs (onnxruntime's quantizer does)
    root.addHandler(handler)
    try:
        with echo_log("xtag.export", "export", True):
            logging.getLogger("xtag.export").info("writing the graph")
    finally:
        root.removeHandler(handler)
    err = capsys.readouterr().err
    assert err == "export: writing the graph\n"
