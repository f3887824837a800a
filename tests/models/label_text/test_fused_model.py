"""The fused model of a bundle trained with --labels: a label with no training document can be returned, a text that
embeds to nothing gets the tree's answer, no score is NaN; a names-only label file trains as without one."""

from __future__ import annotations

import json

import numpy as np
import pytest
from xtag.models.bundle.loader import load_bundle
from xtag.models.explain.linear import ExplainUnavailable
from xtag.models.explain.select import explainer_for
from xtag.models.label_text.model import FusedModel

from tests.conftest import TOPICS
from tests.label_text_support import (  # noqa: F401  (pytest fixtures)
    NEW_LABEL,
    NEW_WORDS,
    fused_bundle,
    label_file,
    train_fused,
)


def test_a_label_no_training_document_carries_is_returned(fused_bundle):
    predictor = load_bundle(fused_bundle).predictor
    assert isinstance(predictor.model, FusedModel)
    assert predictor.vocab.names[-1] == NEW_LABEL and predictor.vocab.frequencies[-1] == 0
    assert predictor.model.tree.n_labels == len(TOPICS) == predictor.n_labels - 1
    manifest = json.loads((fused_bundle / "manifest.json").read_text())
    assert [c["type"] for c in manifest["components"]][-3:] == ["label-encoder", "label-index", "label-fusion"]
    assert manifest["label_count"] == predictor.n_labels
    # a corpus this small has too few held-out positives for the boosted trees: the logistic fusion is fitted instead
    assert predictor.model.fusion.trees is None and predictor.model.fusion.weights is not None
    top = predictor.named(predictor.predict([NEW_WORDS], k=3))[0]
    assert top[0][1] == NEW_LABEL


def test_a_text_that_embeds_to_nothing_gets_the_trees_answer(fused_bundle):
    predictor = load_bundle(fused_bundle).predictor
    model, texts = predictor.model, ["zzzz qqqq", ""]
    preds = predictor.predict(texts, k=4)
    tree = model.tree.predict(predictor.featurizer.inner.transform(texts), k=4)
    assert np.array_equal(preds.labels, tree.labels)
    assert np.isfinite(preds.scores).all()


def test_no_score_is_nan(fused_bundle):
    predictor = load_bundle(fused_bundle).predictor
    texts = [NEW_WORDS, "python module pip", "", "zzzz", "gcc " * 200, "telescope"]
    preds = predictor.predict(texts, k=predictor.n_labels)
    assert not np.isnan(preds.scores).any()
    assert (preds.labels[:, 0] >= 0).all()


def test_a_fused_bundle_says_why_it_has_no_explanation(fused_bundle):
    with pytest.raises(ExplainUnavailable, match="label-text stage"):
        explainer_for(load_bundle(fused_bundle).predictor)


def test_names_only_or_turned_off_trains_as_without_a_label_file(corpus_files, tmp_path):
    names = tmp_path / "names.jsonl"
    names.write_text("".join(json.dumps({"id": t, "name": t}) + "\n" for t in TOPICS))
    plain = train_fused(corpus_files[0], names, tmp_path / "names")
    off = train_fused(corpus_files[0], tmp_path / "names.jsonl", tmp_path / "off", enabled=False)
    for bundle in (plain, off):
        manifest = json.loads((bundle / "manifest.json").read_text())
        assert [c["type"] for c in manifest["components"]] == ["tfidf", "label-tree", "rankers"]
        assert not isinstance(load_bundle(bundle).predictor.model, FusedModel)
