"""`xtag update` of an XR-Transformer run (issue 26): the fine-tuned encoder kept, its rankers grown on Φ_cat.

The old run (the conftest topics and the tiny BERT, fine-tuned) has seen chemistry words in a few biology
documents but no chemistry label. The update's corpus corrects those documents (same ids, one text
rewritten) with a new label `sci::chem` and brings new chemistry documents. RUN2 must export and serve the
new label, copy the rankers of untouched clusters, keep the encoder byte for byte, and encode only the rows
the run has no embedding for (falling back to encoding all of them when the run's cache is absent or
belongs to other rows).
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
from xtag.models.bundle.loader import load_bundle
from xtag.models.xlinear.model import XLinearModel
from xtag.training.export.export_run import export_run
from xtag.training.run import train_run
from xtag.training.update_run import update_run
from xtag.training.xr_transformer.kept_embeddings import encoder_digest

from tests.conftest import FILLER, TOPICS, make_rows, make_xr_config, write_jsonl
from tests.training.test_update import same_rows, unchanged_labels

CHEM = "chemistry reagent molecule titration solvent".split()
GEO = "geology basalt tectonic sediment magma".split()
OLD_CHEM = 12  # biology documents of the old run that mention chemistry: the update relabels them
REWRITTEN = 2  # of those, sent back with another text
ADDED = 20  # chemistry documents the run never saw


def chem_text(rng: random.Random, extra: list[str]) -> str:
    return " ".join(rng.sample(CHEM, 3) + extra + rng.sample(FILLER, 2))


def old_rows() -> list[dict]:
    rng = random.Random(3)
    bio = TOPICS["sci::bio"].split()
    chem = [
        {"id": f"chem{i}", "text": chem_text(rng, rng.sample(bio, 2)), "labels": ["sci::bio"]} for i in range(OLD_CHEM)
    ]
    return make_rows(300, seed=1) + chem


def new_rows(old: list[dict]) -> list[dict]:
    rng = random.Random(4)
    fixed = [dict(r, labels=["sci::bio", "sci::chem"]) for r in old if r["id"].startswith("chem")]
    for r in fixed[:REWRITTEN]:
        r["text"] = chem_text(rng, ["genome"])
    return fixed + [{"id": f"new{i}", "text": chem_text(rng, []), "labels": ["sci::chem"]} for i in range(ADDED)]


def events(run: Path, name: str) -> list[dict]:
    return [e for e in map(json.loads, (run / "train_log.jsonl").read_text().splitlines()) if e["event"] == name]


@pytest.fixture(scope="module")
def runs(tiny_bert, tmp_path_factory):
    """(old run, updated run, folder): a fine-tuned tiny XR-Transformer and its update by `new_rows`."""
    folder = tmp_path_factory.mktemp("xr-update")
    old = old_rows()
    corpus = write_jsonl(folder / "train.jsonl", old)
    train_run(make_xr_config(corpus, tiny_bert), folder / "run", progress=False)
    write_jsonl(folder / "new.jsonl", new_rows(old))
    update_run(folder / "run", folder / "new.jsonl", folder / "run2", progress=False)
    return folder / "run", folder / "run2", folder


def test_the_updated_run_exports_and_serves_the_new_label(runs):
    _, run2, folder = runs
    export_run(run2, folder / "bundle2", "updated")
    bundle = load_bundle(folder / "bundle2")
    assert bundle.manifest["model_kind"] == "xr-transformer"
    rng = random.Random(9)
    texts = [chem_text(rng, []) for _ in range(10)]
    named = bundle.predictor.named(bundle.predictor.predict(texts, k=2))
    assert sum("sci::chem" in [name for _, name, *_ in tags] for tags in named) >= 8
    old = bundle.predictor.named(bundle.predictor.predict(["genome protein dna biology sequence"], k=1))
    assert old[0][0][1] == "sci::bio"  # an old label is still served for its text
    assert json.loads((run2 / "summary.json").read_text())["update"]["added_labels"] == 1


def test_the_encoder_is_kept_and_untouched_clusters_keep_their_rankers(runs):
    run, run2, _ = runs
    assert encoder_digest(run2 / "model" / "encoder") == encoder_digest(run / "model" / "encoder")
    a, b = XLinearModel.load(run / "model"), XLinearModel.load(run2 / "model")
    assert b.config.n_features == a.config.n_features and b.config.dense_features == a.config.dense_features
    # the default placement (--clusters new) leaves every old cluster as it was, and copies every old ranker
    assert unchanged_labels(a.chain, b.chain, a.n_labels) == list(range(a.n_labels))
    for t in range(1, a.chain.depth + 1):
        assert all(same_rows(a.levels[t - 1], b.levels[t - 1], i, i) for i in range(a.chain.level_size(t)))
    levels = json.loads((run2 / "summary.json").read_text())["update"]["levels"]
    assert 0 < sum(lv["retrained"] for lv in levels) < sum(lv["nodes"] for lv in levels)


def test_only_rows_without_a_kept_embedding_are_encoded(runs):
    run, run2, _ = runs
    reused, encoded = events(run2, "embeddings")[0], events(run2, "encode")[0]
    n_old = len(old_rows())
    assert encoded["documents"] == REWRITTEN + ADDED and reused["reused"] == n_old - REWRITTEN
    assert Path(reused["source"]).parent == run / "checkpoints" / "xr"  # the run's final training embeddings
    trained = np.load(reused["source"])
    kept = np.load(run2 / "checkpoints" / "update" / "embeddings.npy")
    assert kept.shape == (n_old + ADDED, trained.shape[1])
    same = np.array([r["id"] not in {f"chem{i}" for i in range(REWRITTEN)} for r in old_rows()])
    np.testing.assert_array_equal(kept[:n_old][same], trained[same])  # taken as they were, relabelled rows too
    assert not np.allclose(kept[:n_old][~same], trained[~same], atol=1e-3)  # the rewritten texts were encoded


def copy_run(run: Path, to: Path, checkpoints: bool) -> Path:
    shutil.copytree(run, to, ignore=None if checkpoints else shutil.ignore_patterns("checkpoints"))
    return to


def test_without_the_runs_embeddings_every_row_is_encoded_to_the_same_result(runs, tmp_path):
    run, run2, folder = runs
    bare = copy_run(run, tmp_path / "bare", checkpoints=False)
    update_run(bare, folder / "new.jsonl", tmp_path / "out", progress=False)
    note = events(tmp_path / "out", "embeddings")[0]
    assert note["reused"] == 0 and "no final training embeddings" in note["why"]
    assert events(tmp_path / "out", "encode")[0]["documents"] == len(old_rows()) + ADDED
    full = np.load(tmp_path / "out" / "checkpoints" / "update" / "embeddings.npy")
    mixed = np.load(run2 / "checkpoints" / "update" / "embeddings.npy")
    np.testing.assert_allclose(full, mixed, atol=1e-4)  # reuse changes the cost, not the features


def test_embeddings_of_other_rows_are_not_reused(runs, tmp_path):
    run, _, folder = runs
    moved = copy_run(run, tmp_path / "moved", checkpoints=True)
    changed = old_rows()
    changed[0]["text"] += " solver"  # the run's corpus file edited since training: its cache is of other rows
    config = json.loads((moved / "config.json").read_text())
    config["corpus"] = str(write_jsonl(tmp_path / "edited.jsonl", changed))
    (moved / "config.json").write_text(json.dumps(config))
    update_run(moved, folder / "new.jsonl", tmp_path / "out", progress=False)
    note = events(tmp_path / "out", "embeddings")[0]
    assert note["reused"] == 0 and "fingerprint differs" in note["why"]


def test_an_updated_run_updates_again_from_its_own_embeddings(runs, tmp_path):
    _, run2, _ = runs
    rng = random.Random(5)
    geo = [{"id": f"geo{i}", "text": " ".join(rng.sample(GEO, 3) + CHEM[:1]), "labels": ["sci::geo"]} for i in range(6)]
    update_run(run2, write_jsonl(tmp_path / "geo.jsonl", geo), tmp_path / "run3", progress=False)
    note, encoded = events(tmp_path / "run3", "embeddings")[0], events(tmp_path / "run3", "encode")[0]
    assert note["reused"] == len(old_rows()) + ADDED and encoded["documents"] == len(geo)
    assert Path(note["source"]) == run2 / "checkpoints" / "update" / "embeddings.npy"
    summary = json.loads((tmp_path / "run3" / "summary.json").read_text())
    assert summary["labels"] == 14 and summary["update"]["encoded_documents"] == len(geo)


def test_an_update_cache_of_another_encoder_is_not_reused(runs, tmp_path):
    """An updated run retrained in place (`xtag train --resume`) has a new encoder: its update cache is stale."""
    from safetensors.numpy import load_file, save_file

    _, run2, folder = runs
    retuned = copy_run(run2, tmp_path / "retuned", checkpoints=True)
    weights = retuned / "model" / "encoder" / "model.safetensors"
    save_file({k: v * np.float32(1.01) for k, v in load_file(weights).items()}, str(weights))
    geo = [{"id": "geo0", "text": " ".join(GEO), "labels": ["sci::geo"]}]
    update_run(retuned, write_jsonl(tmp_path / "geo.jsonl", geo), tmp_path / "out", progress=False)
    note = events(tmp_path / "out", "embeddings")[0]
    assert note["reused"] == 0 and "no final training embeddings" in note["why"]
