"""dense.tune=task (issue 24): the token table trained with the matcher's loss tells the labels apart better than
the distilled one, only the rows the training texts use move, the tune repeats exactly with its seed, and the
matcher classifies the labels or, when there are many, a level of a tree built on TF-IDF."""

from __future__ import annotations

import json

import numpy as np
import pytest
from xtag.corpus.files import build_vocab, load_corpus
from xtag.models.features.tfidf import TfidfConfig, TfidfFeaturizer
from xtag.training.tree.build import TreeConfig

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def task_data(tiny_bert, corpus_files):
    """(texts, TaskInputs, distilled encoder) of the fixture corpus, with the tiny BERT as the teacher."""
    from xtag.training.static.config import StaticDenseConfig
    from xtag.training.static.fit import build_static_encoder
    from xtag.training.static.task import TaskInputs

    corpus = load_corpus(corpus_files[0])
    Y, _ = corpus.label_matrix(build_vocab(corpus))
    _, X = TfidfFeaturizer.fit(corpus.texts, TfidfConfig(min_df=1))
    inputs = TaskInputs(X, Y, TreeConfig(branching=2, max_leaf_size=3), threads=1)
    distilled = build_static_encoder(corpus.texts, StaticDenseConfig(source=tiny_bert, dim=16, batch_size=64))
    return corpus.texts, inputs, distilled


def _tune(task_data, **settings):
    from xtag.training.static.config import StaticDenseConfig
    from xtag.training.static.task import tune_task

    texts, inputs, distilled = task_data
    config = StaticDenseConfig(source=None, tune="task", task_epochs=4, task_batch_size=32, **settings)
    return tune_task(distilled, texts, inputs, config, progress=False)


def _centroid_p_at_1(features: np.ndarray, Y) -> float:
    """P@1 of the nearest label centroid: how well the static features alone separate the labels."""
    centroids = np.asarray(Y.T @ features)
    centroids /= np.maximum(np.linalg.norm(centroids, axis=1, keepdims=True), 1e-12)
    top = np.argmax(features @ centroids.T, axis=1)
    return float(np.mean(Y.toarray()[np.arange(len(top)), top] > 0))


def test_task_tuning_lowers_the_matcher_loss_and_separates_the_labels(task_data):
    from xtag.models.features.static_encoder import StaticEncoder

    texts, inputs, distilled = task_data
    table, facts = _tune(task_data, task_lr=0.05)
    tuned = StaticEncoder(distilled.tokenizer, table, distilled.weights, distilled.idf, distilled.config)
    assert facts["matcher"] == "labels" and facts["nodes"] == inputs.Y.shape[1]
    assert facts["loss_after"] < 0.8 * facts["loss_before"]
    before = _centroid_p_at_1(distilled.encode(texts), inputs.Y)
    after = _centroid_p_at_1(tuned.encode(texts), inputs.Y)
    assert 1 - after < 0.75 * (1 - before), (before, after)  # a quarter of the centroid errors gone at least
    used = np.unique(distilled.weight_matrix(texts).indices)
    unused = np.setdiff1d(np.arange(len(table)), used)
    assert facts["tokens_tuned"] == len(used)
    assert not np.allclose(table[used], distilled.table[used])
    np.testing.assert_array_equal(table[unused], distilled.table[unused])  # unseen tokens keep the teacher's


def test_the_tune_repeats_exactly_with_its_seed(task_data):
    first, _ = _tune(task_data, seed=3)
    again, _ = _tune(task_data, seed=3)
    other, _ = _tune(task_data, seed=4)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


def test_with_many_labels_the_matcher_classifies_a_tfidf_tree_level(task_data):
    from xtag.training.static.task import matcher_targets

    _, inputs, _ = task_data
    targets, level = matcher_targets(inputs, max_nodes=5)
    assert level.startswith("level ") and 2 <= targets.shape[1] <= 5 and targets.shape[0] == inputs.Y.shape[0]
    # every document is positive for the cluster of each of its labels, and only those
    assert set(np.diff(targets.indptr)) <= set(range(1, inputs.Y.shape[1] + 1))
    _, facts = _tune(task_data, task_max_nodes=5)
    assert facts["matcher"] == level and facts["nodes"] == targets.shape[1]


def test_task_tuning_needs_the_labels(tiny_bert):
    from xtag.models.errors import XtagError
    from xtag.training.static.config import StaticDenseConfig
    from xtag.training.static.fit import build_static_encoder

    with pytest.raises(XtagError, match="trains on the labels"):
        build_static_encoder(["some text"], StaticDenseConfig(source=tiny_bert, dim=16, tune="task"))


def test_a_task_tuned_run_serves_the_features_it_trained_on(tiny_bert, corpus_files, tmp_path):
    from xtag.models.bundle.loader import load_bundle
    from xtag.models.features.static_encoder import StaticEncoder
    from xtag.models.xr_transformer.concat_features import concat_features
    from xtag.training.config import TrainConfig
    from xtag.training.static.config import StaticDenseConfig
    from xtag.training.xlinear.config import XLinearConfig

    from tests.conftest import assert_serves_without_torch, train_and_export

    dense = StaticDenseConfig(source=tiny_bert, dim=16, batch_size=64, tune="task", task_epochs=2, alpha=0.8)
    config = TrainConfig(
        corpus=corpus_files[0],
        tfidf=TfidfConfig(min_df=1),
        xlinear=XLinearConfig(n_jobs=1, tree=TreeConfig(branching=2, max_leaf_size=4)),
        dense=dense,
    )
    run, bundle = train_and_export(config, tmp_path)
    texts = load_corpus(corpus_files[0]).texts
    tfidf, X = TfidfFeaturizer.fit(texts, TfidfConfig(min_df=1))
    static = StaticEncoder.load(run / "checkpoints" / "static")
    assert static.config.tune == "task"
    served = load_bundle(bundle).predictor.featurizer.transform(texts[:50]).tocsr().toarray()
    np.testing.assert_allclose(served, concat_features(X[:50], static.encode(texts[:50]), 0.8).toarray(), atol=1e-6)
    log = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    (tune,) = [e for e in log if e["event"] == "static_tune"]
    assert tune["tune"] == "task" and tune["loss_after"] < tune["loss_before"]
    assert any(e["event"] == "step" and e.get("tune") == "task" for e in log)  # the shared loop's step log
    assert not (run / "checkpoints" / "static_task").exists()  # spent once the table is saved
    assert_serves_without_torch(bundle, ["shooter arena frag", "python pip module"])
