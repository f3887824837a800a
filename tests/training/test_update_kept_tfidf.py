"""`xtag update` reuses the run's kept TF-IDF rows (training/kept_tfidf.py) instead of featurising its corpus again.

The reuse must be invisible: the update's features equal featurising every row, only new rows and rows whose
text changed are featurised, and a run whose corpus changed since training, or whose kept rows are missing or
damaged, is featurised whole, with the reason in its log.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from xtag.corpus.files import load_corpus
from xtag.models.features.tfidf import TfidfFeaturizer
from xtag.training.config import TrainConfig
from xtag.training.kept_tfidf import FILE, combined_rows, same_texts
from xtag.training.run import train_run
from xtag.training.update_run import merge_corpora, update_run
from xtag.training.xlinear.config import XLinearConfig

WORDS = {f"topic::{i}": [f"w{i}x{j}" for j in range(6)] for i in range(7)}


def corpus_rows(n: int, topics: list[str], prefix: str, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        label = topics[i % len(topics)]
        words = list(rng.choice(WORDS[label], 3)) + ["tool"]
        out.append({"id": f"{prefix}{i}", "text": " ".join(words), "labels": [label]})
    return out


def write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("kept-tfidf")
    corpus = write(folder / "train.jsonl", corpus_rows(120, [f"topic::{i}" for i in range(4)], "d", 1))
    train_run(TrainConfig(corpus=corpus, xlinear=XLinearConfig(n_jobs=1)), folder / "run", progress=False)
    return folder / "run"


def update_corpus(folder: Path) -> Path:
    """Two old rows again (one with a new text), both with a new label, and 10 new rows."""
    changed = {"id": "d0", "text": "w4x1 w4x2 w0x3 tool", "labels": ["topic::0", "topic::4"]}
    same = {"id": "d1", "text": load_corpus(folder / "train.jsonl").texts[1], "labels": ["topic::1", "topic::5"]}
    return write(folder / "new.jsonl", [changed, same, *corpus_rows(10, ["topic::4", "topic::5"], "n", 2)])


def features_event(run2: Path) -> dict:
    events = [json.loads(line) for line in (run2 / "train_log.jsonl").read_text().splitlines()]
    return next(e for e in events if e["event"] == "features")


def test_a_run_keeps_its_rows_and_an_update_featurises_only_new_or_changed_ones(run, tmp_path):
    kept = sp.load_npz(run / "checkpoints" / FILE)
    featurizer = TfidfFeaturizer.load(run / "model" / "features" / "tfidf")
    old = load_corpus(run.parent / "train.jsonl")
    assert kept.shape == (120, featurizer.dim)
    np.testing.assert_allclose(kept.toarray(), featurizer.transform(old.texts).toarray(), atol=1e-6)
    update_run(run, update_corpus(run.parent), tmp_path / "run2", progress=False)
    event = features_event(tmp_path / "run2")
    assert event["featurised"] == 11 and event["reused"] == 119  # d0's new text and the 10 new rows
    # the new run keeps the combined corpus's rows in turn, equal to featurising every row
    merged = load_corpus(tmp_path / "run2" / "corpus.jsonl.gz")
    again = sp.load_npz(tmp_path / "run2" / "checkpoints" / FILE)
    np.testing.assert_allclose(again.toarray(), featurizer.transform(merged.texts).toarray(), atol=1e-6)


def test_combined_rows_equal_featurising_every_row():
    texts = ["aa bb cc", "bb cc dd", "cc dd ee", "dd ee ff"]
    featurizer, X = TfidfFeaturizer.fit(texts)
    old = load_corpus_like(texts)
    new = load_corpus_like(["bb cc xx", "ee ff aa"], ids=["1", "9"])  # row 1 rewritten, one row added
    merged = merge_corpora(old, new)
    rows, featurised = combined_rows(featurizer, merged, same_texts(old, merged), X)
    assert featurised == 2
    np.testing.assert_allclose(rows.toarray(), featurizer.transform(merged.texts).toarray(), atol=1e-6)


def load_corpus_like(texts: list[str], ids: list[str] | None = None):
    from xtag.corpus.files import Corpus

    return Corpus(ids=ids or [str(i) for i in range(len(texts))], texts=texts, labels=[["x"]] * len(texts))


@pytest.mark.parametrize("damage", ["corpus changed", "rows missing", "rows damaged"])
def test_without_trustworthy_kept_rows_every_row_is_featurised_and_the_log_says_why(run, tmp_path, damage):
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    if damage == "corpus changed":  # the run now points at a corpus with one row more
        train = load_corpus(run.parent / "train.jsonl")
        rows = [{"id": i, "text": t, "labels": ls} for i, t, ls in zip(train.ids, train.texts, train.labels)]
        corpus = write(tmp_path / "train.jsonl", rows + corpus_rows(1, ["topic::2"], "extra", 3))
        config = TrainConfig.load(copy / "config.json").model_copy(update={"corpus": corpus})
        (copy / "config.json").write_text(config.model_dump_json())
    elif damage == "rows missing":
        (copy / "checkpoints" / FILE).unlink()
    else:
        (copy / "checkpoints" / FILE).write_bytes(b"not a zip file")
    update_run(copy, update_corpus(run.parent), tmp_path / "run2", progress=False)
    event = features_event(tmp_path / "run2")
    n_old = len(load_corpus(TrainConfig.load(copy / "config.json").corpus))
    assert event["reused"] == 0 and event["featurised"] == n_old + 10  # every row of the combined corpus
    why = {"corpus changed": "fingerprint differs", "rows missing": "missing", "rows damaged": "unreadable"}[damage]
    assert why in event["why"] and event["why"].startswith("featurising every row")


def test_an_updated_run_updates_again_from_its_own_kept_rows(run, tmp_path):
    update_run(run, update_corpus(run.parent), tmp_path / "run2", progress=False)
    third = write(tmp_path / "third.jsonl", corpus_rows(6, ["topic::6"], "m", 4))  # one more new label
    summary = update_run(tmp_path / "run2", third, tmp_path / "run3", progress=False)
    event = features_event(tmp_path / "run3")
    assert event["featurised"] == 6 and event["source"].startswith(str(tmp_path / "run2"))
    assert summary["labels"] == 7 and summary["update"]["levels"][0]["retrained"] == 1  # one more top cluster


def test_a_run_of_a_family_without_update_keeps_no_rows(lamp_bundle):
    run, _ = lamp_bundle  # LaMP cannot be updated: its corpus's TF-IDF rows would be written for nothing
    assert (run / "checkpoints").is_dir() and not (run / "checkpoints" / FILE).exists()
