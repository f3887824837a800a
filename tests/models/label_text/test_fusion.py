"""The fusion: an old logistic fusion.json scores as it did, the boosted trees walk as sklearn's do, the places kept
for labels with no training document, and a fusion naming an unknown feature or two models fails at load."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pydantic import ValidationError
from xtag.models.errors import XtagError
from xtag.models.label_text.fusion import FEATURES, Fusion, candidate_features
from xtag.training.label_text.fusion import BOOSTED_LEAVES, BOOSTED_TREES, NEW_POSITIVE_WEIGHT, _boosted

OLD = {  # a fusion.json as the first fused bundles wrote it (debdeps' TF-IDF cosine stage)
    "features": ["tree_score", "tree_absent", "cosine", "log_frequency", "no_documents", "cosine_absent"],
    "weights": [5.474, -2.228, 2.438, 0.128, 1.133, 1.591],
    "intercept": -3.451,
    "tree_candidates": 20,
    "index_candidates": 20,
    "heldout_documents": 4378,
}


def random_candidates(rng, n=30, c=8):
    tree_rank = np.where(rng.random((n, c)) < 0.5, np.arange(c), -1)
    index_rank = np.where(tree_rank < 0, np.arange(c), np.where(rng.random((n, c)) < 0.5, 3, -1))
    scores = np.where(tree_rank >= 0, rng.random((n, c)), 0.0)
    frequency = rng.integers(0, 5, (n, c))
    return scores, tree_rank, index_rank, rng.random((n, c)), frequency


def test_an_old_fusion_json_loads_and_scores_as_before(tmp_path):
    (tmp_path / "fusion.json").write_text(json.dumps(OLD))
    fusion = Fusion.load(tmp_path / "fusion.json")
    scores, tree_rank, index_rank, cosine, frequency = random_candidates(np.random.default_rng(0))
    absent = (tree_rank < 0).astype(float)
    before = np.stack([scores, absent, cosine, np.log1p(frequency), frequency == 0, cosine * absent], axis=-1)
    expected = before @ np.array(OLD["weights"]) + OLD["intercept"]
    got = fusion.logits(candidate_features(scores, tree_rank, index_rank, cosine, frequency))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert fusion.new_label_places == 0 and fusion.trees is None


def test_boosted_trees_score_as_sklearn_does_and_survive_json(tmp_path):
    from sklearn.ensemble import HistGradientBoostingClassifier

    rng = np.random.default_rng(1)
    X = rng.random((1000, len(FEATURES))).astype(np.float32)
    y = (X[:, 0] * X[:, 2] + 0.3 * (X[:, 4] > 0.5) + 0.1 * rng.random(1000)) > 0.5
    fusion = _boosted(X, y, {"tree_candidates": 3, "index_candidates": 3, "heldout_documents": 10})
    fusion.save(tmp_path / "fusion.json")
    fusion = Fusion.load(tmp_path / "fusion.json")
    reference = HistGradientBoostingClassifier(
        max_iter=BOOSTED_TREES, learning_rate=0.1, max_leaf_nodes=BOOSTED_LEAVES, early_stopping=False, random_state=0
    ).fit(X, y, sample_weight=np.where(y & (X[:, FEATURES.index("no_documents")] > 0), NEW_POSITIVE_WEIGHT, 1.0))
    np.testing.assert_allclose(fusion.logits(X[None]), reference.decision_function(X)[None], atol=1e-4)
    assert np.isfinite(fusion.logits(np.zeros((2, 5, len(FEATURES)), np.float32))).all()


def test_places_after_the_fifth_go_to_labels_with_no_training_document():
    fusion = Fusion(**{**OLD, "new_label_places": 2})
    labels = np.arange(12)[None]
    scores = np.linspace(1.0, 0.1, 12, dtype=np.float32)[None]
    new = np.isin(labels, [4, 9, 10, 11])
    ids, best = fusion.top(scores, labels, new, 10)
    assert ids.tolist() == [[0, 1, 2, 3, 4, 5, 6, 7, 9, 10]]  # 4 is new but in the head; 9 and 10 lifted
    np.testing.assert_allclose(best[0, 8:], scores[0, [9, 10]])
    assert fusion.top(scores, labels, new, 5)[0].tolist() == [[0, 1, 2, 3, 4]]  # P@1..P@5 are the ranking's own
    one_new = np.isin(labels, [11])  # fewer new ones than places: the plain ranking's next fills the rest
    assert fusion.top(scores, labels, one_new, 10)[0].tolist() == [[0, 1, 2, 3, 4, 5, 6, 7, 11, 8]]
    padded = np.where(labels < 6, scores, -np.inf).astype(np.float32)  # fewer candidates than k: padding, no NaN
    ids, best = fusion.top(padded, labels, new, 10)
    assert ids[0, 6:].tolist() == [-1] * 4 and not np.isnan(best).any()


@pytest.mark.parametrize(
    "change",
    [
        {"features": [*OLD["features"][:5], "telepathy"]},
        {
            "trees": {
                "roots": [0],
                "feature": [0],
                "threshold": [0.0],
                "left": [-1],
                "right": [-1],
                "value": [1.0],
                "depth": 0,
            }
        },
        {"weights": OLD["weights"][:5]},
    ],
)
def test_a_fusion_naming_an_unknown_feature_or_two_models_fails_at_load(tmp_path, change):
    (tmp_path / "fusion.json").write_text(json.dumps({**OLD, **change}))
    with pytest.raises((XtagError, ValidationError)):
        Fusion.load(tmp_path / "fusion.json")
