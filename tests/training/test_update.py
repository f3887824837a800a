"""`xtag update`: labels added to a trained XR-Linear run without a full retrain (issue 26).

A run over 12 topic labels gets 2 new ones from new documents. The new labels must be predicted for their
documents, every old label whose cluster the update left alone must keep its scores exactly, an
overflowing leaf must be split, the new run must export and evaluate with old and new labels apart,
and a killed update must leave the old run as it was.
"""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner
from xtag.models.bundle.loader import load_bundle
from xtag.models.errors import XtagError
from xtag.models.label_tree import ClusterChain
from xtag.models.xlinear.model import XLinearModel
from xtag.training.config import TrainConfig
from xtag.training.export.export_run import export_run
from xtag.training.run import train_run
from xtag.training.tree.build import TreeConfig
from xtag.training.update_run import update_run
from xtag.training.xlinear.config import XLinearConfig

from xtag.cli import app as cli

TOPICS = {f"topic::{i}": [f"w{i}x{j}" for j in range(6)] for i in range(14)}
OLD = [f"topic::{i}" for i in range(12)]
NEW = {"topic::12": "topic::0", "topic::13": "topic::5"}  # new label -> the old topic its documents share words with


def rows(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        labels = rng.sample(OLD, rng.choice([1, 2]))
        words = [w for lab in labels for w in rng.sample(TOPICS[lab], 3)] + ["tool", "data"]
        out.append({"id": f"d{i}", "text": " ".join(words), "labels": sorted(labels)})
    return out


def new_rows(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        label = list(NEW)[i % 2]
        words = rng.sample(TOPICS[label], 3) + rng.sample(TOPICS[NEW[label]], 2)
        out.append({"id": f"n{i}", "text": " ".join(words), "labels": [label, NEW[label]]})
    return out


def write(path: Path, data: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in data))
    return path


# case -> (max_leaf_size, --clusters): leaves of 4 take a nearest new label each, leaves of 3 overflow and split;
# "new" (the default) gives the new labels a subtree of their own
CASES = {"fits": (4, "refit"), "overflows": (3, "refit"), "new": (4, "new")}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """case -> (old run, updated run, folder), each built once for the module."""
    done: dict = {}

    def build(case: str):
        if case not in done:
            leaf, placement = CASES[case]
            folder = tmp_path_factory.mktemp(f"update-{case}")
            corpus = write(folder / "train.jsonl", rows(300, 1))
            config = TrainConfig(corpus=corpus, xlinear=XLinearConfig(tree=TreeConfig(max_leaf_size=leaf), n_jobs=1))
            train_run(config, folder / "run", progress=False)
            write(folder / "new.jsonl", new_rows(40, 2))
            update_run(folder / "run", folder / "new.jsonl", folder / "run2", progress=False, clusters=placement)
            done[case] = (folder / "run", folder / "run2", folder)
        return done[case]

    return build


@pytest.fixture(params=list(CASES))
def runs(request, built):
    return built(request.param)


@pytest.fixture(params=["fits", "overflows"])
def nearest(request, built):
    """Runs updated by the nearest-cluster rule (`--clusters refit`)."""
    return built(request.param)


def unchanged_labels(old: ClusterChain, new: ClusterChain, n_old: int) -> list[int]:
    """Old labels whose leaf cluster holds exactly the same labels before and after."""

    def clusters(chain):
        t = chain.depth - 1
        groups: dict[int, set] = {}
        for label, c in enumerate(chain.ancestors(t)):
            groups.setdefault(int(c), set()).add(label)
        return {label: frozenset(groups[int(c)]) for label, c in enumerate(chain.ancestors(t))}

    before, after = clusters(old), clusters(new)
    return [j for j in range(n_old) if before[j] == after[j]]


def test_new_labels_are_added_with_old_ids_kept(runs):
    run, run2, _ = runs
    summary = json.loads((run2 / "summary.json").read_text())
    names = json.loads((run2 / "model" / "labels.json").read_text())["names"]
    old_names = json.loads((run / "model" / "labels.json").read_text())["names"]
    assert names[: len(old_names)] == old_names and sorted(names[len(old_names) :]) == sorted(NEW)
    assert summary["update"]["old_labels"] == len(old_names) and summary["update"]["added_labels"] == 2
    retrained = sum(level["retrained"] for level in summary["update"]["levels"])
    assert 0 < retrained < sum(level["nodes"] for level in summary["update"]["levels"])  # not a full retrain


def same_rows(a, b, i: int, j: int) -> bool:
    wa, wb = a.W[i], b.W[j]
    return wa.nnz == wb.nnz and (wa != wb).nnz == 0 and a.bias[i] == b.bias[j]


def full_scores(bundle_dirs: list[Path], texts: list[str]) -> list[np.ndarray]:
    """Every label's score for every text, per bundle: a beam as wide as the widest level."""
    scores = []
    for folder in bundle_dirs:
        predictor = load_bundle(folder).predictor
        preds = predictor.predict(texts, k=predictor.n_labels, beam_size=64)
        full = np.zeros((len(texts), predictor.n_labels))
        for i, (ids, s) in enumerate(zip(preds.labels, preds.scores)):
            full[i, ids[ids >= 0]] = s[ids >= 0]
        scores.append(full)
    return scores


def test_old_labels_in_unchanged_clusters_keep_their_rankers_and_scores(nearest):
    run, run2, folder = nearest
    a, b = XLinearModel.load(run / "model"), XLinearModel.load(run2 / "model")
    keep = unchanged_labels(a.chain, b.chain, a.n_labels)
    assert keep and len(keep) < a.n_labels  # some clusters changed, some did not
    D = a.chain.depth
    leaf_a, leaf_b = a.chain.ancestors(D), b.chain.ancestors(D)
    cl_a, cl_b = a.chain.ancestors(D - 1), b.chain.ancestors(D - 1)
    # the label rankers of unchanged clusters are copied, not retrained
    assert all(same_rows(a.levels[-1], b.levels[-1], leaf_a[j], leaf_b[j]) for j in keep)
    # so are old labels' rankers in clusters that only gained a label (no split): only the new labels are trained
    split = b.chain.level_size(D - 1) > a.chain.level_size(D - 1)
    if not split:
        assert all(same_rows(a.levels[-1], b.levels[-1], leaf_a[j], leaf_b[j]) for j in range(a.n_labels))
        assert json.loads((run2 / "summary.json").read_text())["update"]["levels"][-1]["retrained"] == len(NEW)
    # where the cluster's own ranker was left alone too (no split beside it), the label's scores are the same
    untouched = [j for j in keep if same_rows(a.levels[-2], b.levels[-2], cl_a[j], cl_b[j])]
    assert split or untouched == keep  # without a split only changed clusters are retrained
    for r in (run, run2):
        export_run(r, folder / f"bundle-{r.name}", r.name, overwrite=True)
    scores = full_scores([folder / "bundle-run", folder / "bundle-run2"], [r["text"] for r in rows(60, 9)])
    np.testing.assert_allclose(scores[1][:, untouched], scores[0][:, untouched], rtol=1e-6, atol=1e-7)


def test_new_clusters_copy_every_old_ranker_and_keep_every_old_score(built):
    """--clusters new: the new labels hang under new nodes only, so every old node keeps its ranker and every old
    label its scores; only the new nodes are trained."""
    run, run2, folder = built("new")
    a, b = XLinearModel.load(run / "model"), XLinearModel.load(run2 / "model")
    levels = json.loads((run2 / "summary.json").read_text())["update"]["levels"]
    for t in range(1, a.chain.depth + 1):
        n = a.chain.level_size(t)
        assert b.chain.level_size(t) > n and levels[t - 1]["retrained"] == b.chain.level_size(t) - n
        assert all(same_rows(a.levels[t - 1], b.levels[t - 1], i, i) for i in range(n))
        parents = b.chain.parents(t)
        assert (parents[:n] < (a.chain.level_size(t - 1) if t > 1 else 1)).all()  # old nodes under old parents
        if t > 1:
            assert (parents[n:] >= a.chain.level_size(t - 1)).all()  # new nodes under new parents only
    gate = levels[0]["gate_positive_weights"]  # 40 of 340 documents carry a new label: sqrt(300 / 40)
    assert gate == [pytest.approx(np.sqrt(300 / 40), abs=1e-3)]
    new_ids = np.arange(a.n_labels, b.n_labels)
    assert set(b.chain.ancestors(1)[new_ids]) == set(range(a.chain.level_size(1), b.chain.level_size(1)))
    for r in (run, run2):
        export_run(r, folder / f"bundle-{r.name}", r.name, overwrite=True)
    scores = full_scores([folder / "bundle-run", folder / "bundle-run2"], [r["text"] for r in rows(60, 9)])
    np.testing.assert_allclose(scores[1][:, : a.n_labels], scores[0], rtol=1e-6, atol=1e-7)


def test_new_labels_are_predicted_for_their_documents(runs):
    _, run2, folder = runs
    out = folder / "bundle-new"
    export_run(run2, out, "updated")
    test = new_rows(20, 7)
    preds = load_bundle(out).predictor.predict([r["text"] for r in test], k=2)
    names = load_bundle(out).predictor.vocab.names
    found = sum(r["labels"][0] in [names[j] for j in ids if j >= 0] for r, ids in zip(test, preds.labels))
    assert found >= 18


def test_an_overflowing_leaf_is_split(nearest):
    run, run2, _ = nearest
    a, b = (ClusterChain.load(r / "model" / "tree" / "chain.npz") for r in (run, run2))
    limit = TrainConfig.load(run / "config.json").xlinear.tree.max_leaf_size
    assert np.diff(b.ptrs[-1]).max() <= limit  # no leaf over the limit after the update
    grew = b.level_size(b.depth - 1) > a.level_size(a.depth - 1)
    overflowed = np.diff(a.ptrs[-1]).max() == limit  # full leaves (3 of 3) cannot take a label without a split
    assert grew == overflowed


def test_evaluate_reports_old_and_new_labels_apart(runs, tmp_path):
    _, run2, folder = runs
    out = folder / "bundle-eval"
    export_run(run2, out, "updated")
    corpus = write(tmp_path / "test.jsonl", rows(30, 5) + new_rows(10, 6))
    report = tmp_path / "report.json"
    result = CliRunner().invoke(
        cli, ["evaluate", str(out), "--corpus", str(corpus), "--json", str(report), "--no-progress"]
    )
    assert result.exit_code == 0, result.output
    flat = json.loads(report.read_text())
    assert flat["new/micro-R@5"] > 80 and "old/micro-R@5" in flat
    assert "labels the update added" in result.output


def test_the_cli_updates_and_refuses_a_corpus_without_new_labels(built, tmp_path):
    run, _, folder = built("new")
    out = tmp_path / "run3"
    same = CliRunner().invoke(cli, ["update", str(run), "--corpus", str(folder / "train.jsonl"), "--out", str(out)])
    assert same.exit_code == 2 and "nothing to add" in same.output and not out.exists()
    ok = CliRunner().invoke(
        cli, ["update", str(run), "--corpus", str(folder / "new.jsonl"), "--out", str(out), "--no-progress"]
    )
    assert ok.exit_code == 0, ok.output
    assert json.loads((out / "summary.json").read_text())["labels"] == 14
    with pytest.raises(XtagError, match="already exists"):
        update_run(run, folder / "new.jsonl", out)


def digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


KILL_BEFORE_RENAME = """
import os, signal, sys
from pathlib import Path
import xtag.training.update_run as u
real = u.save_model
def save_then_die(*args, **kwargs):
    real(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)  # killed after the new model is written, before the rename
u.save_model = save_then_die
u.update_run(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), progress=False)
"""


def test_a_killed_update_leaves_the_old_run_intact(built, tmp_path):
    run, _, folder = built("new")
    before = digest(run)
    out = tmp_path / "run-killed"
    proc = subprocess.run([sys.executable, "-c", KILL_BEFORE_RENAME, str(run), str(folder / "new.jsonl"), str(out)])
    assert proc.returncode == -9
    assert digest(run) == before and not out.exists()
    update_run(run, folder / "new.jsonl", out, progress=False)  # a rerun clears the leftovers and finishes
    assert (out / "model" / "labels.json").is_file() and not any(
        p.name.endswith(".updating") for p in tmp_path.iterdir()
    )


@pytest.mark.parametrize("kind", ["lightxml", "cascadexml", "lamp"])
def test_a_run_of_a_family_without_update_is_refused_naming_those_with_it(kind, tmp_path):
    run = tmp_path / f"{kind}-run"
    (run / "model").mkdir(parents=True)
    corpus = write(tmp_path / "c.jsonl", rows(5, 1))
    (run / "config.json").write_text(TrainConfig(corpus=corpus, model=kind).model_dump_json())
    with pytest.raises(XtagError, match=f"{kind} does not support adding labels.*supported by xlinear, xr-transformer"):
        update_run(run, write(tmp_path / "n.jsonl", new_rows(4, 1)), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_new_rows_replace_old_rows_of_the_same_id_and_new_names_follow_the_old():
    from xtag.corpus.files import Corpus
    from xtag.models.labels import LabelVocab
    from xtag.training.update_run import grown_vocab, merge_corpora

    old = Corpus(ids=["a", "b"], texts=["ta", "tb"], labels=[["x"], ["y"]])
    new = Corpus(ids=["b", "c"], texts=["tb2", "tc"], labels=[["y", "z"], ["w"]])
    merged = merge_corpora(old, new)
    assert (merged.ids, merged.texts, merged.labels) == (
        ["a", "b", "c"],
        ["ta", "tb2", "tc"],
        [["x"], ["y", "z"], ["w"]],
    )
    vocab = grown_vocab(LabelVocab(["y", "x"], [1, 1], 2), merged)
    assert vocab.names == ["y", "x", "z", "w"] and vocab.frequencies == [1, 1, 1, 1] and vocab.n_train_docs == 3


def test_keep_clusters_trains_only_the_new_labels(nearest, tmp_path):
    run, _, folder = nearest
    out = tmp_path / "kept"
    update_run(run, folder / "new.jsonl", out, progress=False, clusters="keep")
    a, b = XLinearModel.load(run / "model"), XLinearModel.load(out / "model")
    levels = json.loads((out / "summary.json").read_text())["update"]["levels"]
    if b.chain.level_size(b.chain.depth - 1) == a.chain.level_size(a.chain.depth - 1):  # no split
        assert [lv["retrained"] for lv in levels] == [0, len(NEW)]
        D = a.chain.depth
        cl_a, cl_b = a.chain.ancestors(D - 1), b.chain.ancestors(D - 1)
        assert all(same_rows(a.levels[-2], b.levels[-2], cl_a[j], cl_b[j]) for j in range(a.n_labels))
    else:  # a split retrains the pieces and their siblings, and every label of the pieces
        assert 0 < levels[0]["retrained"] and levels[-1]["retrained"] >= len(NEW)
    names = json.loads((out / "model" / "labels.json").read_text())["names"]
    export_run(out, tmp_path / "bundle", "kept")
    test = new_rows(20, 7)
    preds = load_bundle(tmp_path / "bundle").predictor.predict([r["text"] for r in test], k=3)
    found = sum(r["labels"][0] in [names[j] for j in ids if j >= 0] for r, ids in zip(test, preds.labels))
    assert found >= 16  # the old cluster rankers still route the new labels' documents


def test_a_run_without_cluster_levels_takes_new_labels_under_its_root(tmp_path):
    """12 labels with leaves of 100: the tree is the root alone; the new labels become its children."""
    corpus = write(tmp_path / "train.jsonl", rows(300, 1))
    config = TrainConfig(corpus=corpus, xlinear=XLinearConfig(tree=TreeConfig(max_leaf_size=100), n_jobs=1))
    train_run(config, tmp_path / "run", progress=False)
    assert XLinearModel.load(tmp_path / "run" / "model").chain.depth == 1
    update_run(tmp_path / "run", write(tmp_path / "new.jsonl", new_rows(40, 2)), tmp_path / "run2", progress=False)
    a, b = XLinearModel.load(tmp_path / "run" / "model"), XLinearModel.load(tmp_path / "run2" / "model")
    assert b.chain.depth == 1 and b.n_labels == 14
    assert all(same_rows(a.levels[0], b.levels[0], i, i) for i in range(12))  # old label rankers copied
    export_run(tmp_path / "run2", tmp_path / "bundle", "updated")
    predictor = load_bundle(tmp_path / "bundle").predictor
    test = new_rows(20, 7)
    preds = predictor.predict([r["text"] for r in test], k=2)
    found = sum(
        r["labels"][0] in [predictor.vocab.names[j] for j in ids if j >= 0] for r, ids in zip(test, preds.labels)
    )
    assert found >= 18
