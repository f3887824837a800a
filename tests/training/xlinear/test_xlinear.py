import json

import numpy as np
import pytest
from xtag.corpus.files import build_vocab, load_corpus
from xtag.models.features.tfidf import TfidfConfig, TfidfFeaturizer
from xtag.models.metrics import evaluate
from xtag.training.tree.build import TreeConfig
from xtag.training.xlinear.config import XLinearConfig
from xtag.training.xlinear.train import train_xlinear


@pytest.fixture(scope="module")
def data(corpus_files):
    train, test = load_corpus(corpus_files[0]), load_corpus(corpus_files[1])
    vocab = build_vocab(train)
    featurizer, X = TfidfFeaturizer.fit(train.texts, TfidfConfig(min_df=1))
    return X, train.label_matrix(vocab)[0], featurizer.transform(test.texts), test.label_matrix(vocab)[0]


@pytest.mark.parametrize(
    "negatives, loss", [("tfn", "squared-hinge"), ("tfn+man", "squared-hinge"), ("man", "logistic")]
)
def test_learns_separable_topics(data, negatives, loss):
    X, Y, Xt, Yt = data
    config = XLinearConfig(negatives=negatives, loss=loss, n_jobs=2, tree=TreeConfig(branching=2, max_leaf_size=3))
    model = train_xlinear(X, Y, config, progress=False)
    assert model.chain.depth >= 3
    m = evaluate(model.predict(Xt, k=3).labels, Yt, (1, 3))
    assert m["P@1"] > 90 and m["R@3"] > 85


def test_pruning_threshold_drops_small_weights(data):
    X, Y, _, _ = data
    dense = train_xlinear(X, Y, XLinearConfig(threshold=0.0, n_jobs=1), progress=False)
    pruned = train_xlinear(X, Y, XLinearConfig(threshold=0.3, n_jobs=1), progress=False)
    assert pruned.levels[-1].W.nnz < dense.levels[-1].W.nnz
    assert np.abs(pruned.levels[-1].W.data).min() >= 0.3


def test_resume_reuses_finished_levels(data, tmp_path):
    X, Y, Xt, _ = data
    config = XLinearConfig(n_jobs=1, tree=TreeConfig(branching=2, max_leaf_size=3))
    events = []
    first = train_xlinear(X, Y, config, checkpoint_dir=tmp_path, progress=False, log=events.append)
    (tmp_path / f"level_{first.chain.depth}.npz").unlink()  # as if killed during the last level
    events.clear()
    second = train_xlinear(X, Y, config, checkpoint_dir=tmp_path, progress=False, log=events.append)
    resumed = [e["what"] for e in events if e["event"] == "resume"]
    assert resumed == ["tree"] + [f"level {t}" for t in range(1, first.chain.depth)]
    assert (first.predict(Xt, k=3).labels == second.predict(Xt, k=3).labels).all()
    json.dumps(events)  # the run log must stay serialisable


def test_matcher_aware_negatives_come_from_the_engine_as_from_the_reference(data):
    # The trainer's matcher (the top nodes of a partly trained tree) is the service's engine; it must
    # pick what the numpy reference beam search picks when stopped at the same level.
    from xtag.models.inference.beam_search import beam_search
    from xtag.models.inference.types import TreeIndex
    from xtag.training.xlinear.train import _matcher_top

    X, Y, _, _ = data
    model = train_xlinear(X, Y, XLinearConfig(n_jobs=1, tree=TreeConfig(branching=2, max_leaf_size=3)), progress=False)
    for t in range(1, model.chain.depth):
        ours = _matcher_top(X, model.levels[:t], model.chain, 3, 2, "l3-hinge")
        reference = beam_search(X, model.levels[:t], TreeIndex(model.chain), 3, 2, "l3-hinge", stop_level=t)
        assert (ours.labels == reference.labels).all()
        assert np.allclose(ours.scores, reference.scores, atol=1e-5)
