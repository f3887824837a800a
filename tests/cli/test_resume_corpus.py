"""`xtag train --resume` checks the corpus by its rows: a changed one is a one-line error with exit status 3
(scripts/main.sh acts on it), a moved one resumes, and a run from before fingerprints resumes with a log line."""

import gzip
import json

from typer.testing import CliRunner

from tests.conftest import make_rows, write_jsonl
from xtag.cli import app

runner = CliRunner()


def _train(corpus, run, *extra):
    args = ["train", "--corpus", str(corpus), "--out", str(run), "--threads", "1", "--no-progress", "--branching", "2"]
    return runner.invoke(app, args + list(extra))


def _log_events(run):
    return [json.loads(line)["event"] for line in (run / "train_log.jsonl").read_text().splitlines()]


def test_resume_onto_another_corpus_is_a_clear_error_and_leaves_the_run(tmp_path):
    corpus, run = tmp_path / "train.jsonl", tmp_path / "run"
    write_jsonl(corpus, make_rows(200, seed=1))
    assert _train(corpus, run).exit_code == 0
    saved = json.loads((run / "corpus.json").read_text())
    assert saved["documents"] == 200 and saved["labels"] == 12
    model = (run / "model" / "labels.json").read_bytes()

    # The apt lists changed between two runs of main.sh: fewer documents, one label fewer, same file.
    write_jsonl(corpus, [r for r in make_rows(150, seed=5) if "role::tail" not in r["labels"]])
    r = _train(corpus, run, "--resume")
    assert r.exit_code == 3, r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "corpus changed" in lines[0]
    assert "200 documents, 12 labels" in lines[0] and "11 labels" in lines[0] and "--out" in lines[0]
    assert (run / "model" / "labels.json").read_bytes() == model
    assert json.loads((run / "corpus.json").read_text()) == saved


def test_the_same_rows_moved_and_recompressed_resume(tmp_path):
    rows = make_rows(200, seed=1)
    first, run = write_jsonl(tmp_path / "a.jsonl", rows), tmp_path / "run"
    assert _train(first, run).exit_code == 0
    moved = tmp_path / "elsewhere" / "train.jsonl.gz"
    moved.parent.mkdir()
    with gzip.open(moved, "wt") as fh:
        fh.writelines(json.dumps({**row, "id": f"other{i}"}) + "\n" for i, row in enumerate(rows))
    r = _train(moved, run, "--resume")
    assert r.exit_code == 0, r.output
    assert json.loads((run / "config.json").read_text())["corpus"] == str(moved)


def test_a_run_from_before_fingerprints_resumes_only_on_its_own_file(tmp_path):
    corpus, run = write_jsonl(tmp_path / "train.jsonl", make_rows(200, seed=1)), tmp_path / "run"
    assert _train(corpus, run).exit_code == 0
    (run / "corpus.json").unlink()

    r = _train(corpus, run, "--resume")
    assert r.exit_code == 0, r.output
    assert "corpus_unchecked" in _log_events(run)

    other = write_jsonl(tmp_path / "other.jsonl", make_rows(200, seed=1))
    r = _train(other, run, "--resume")
    assert r.exit_code == 3 and "predates corpus fingerprints" in r.output
    assert json.loads((run / "config.json").read_text())["corpus"] == str(corpus)  # nothing recorded the new path
