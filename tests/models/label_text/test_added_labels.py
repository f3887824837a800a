"""Labels added after the fusion was fitted (`xtag update --labels`) leave the fitted labels' scores as they were,
even for a fusion that reads a candidate's place in the index's list and its gap to the best cosine, and can
themselves be returned."""

from __future__ import annotations

from xtag.models.bundle.loader import load_bundle
from xtag.models.label_text.fusion import FEATURES, Fusion
from xtag.models.label_text.model import FusedModel

from tests.conftest import TOPICS
from tests.label_text_support import LATER_WORDS, fused_bundle, label_file  # noqa: F401  (pytest fixtures)

TEXTS = [LATER_WORDS, *(" ".join(words.split()[:3]) for words in TOPICS.values()), "python module pip"]


def rank_reading_fusion(**widths) -> Fusion:
    """A logistic fusion that weighs the index place and the cosine gap (the features an added label could move)."""
    weights = {"tree_score": 2.0, "cosine": 1.0, "index_reciprocal_rank": 3.0, "cosine_gap": 4.0, "no_documents": 0.5}
    return Fusion(features=FEATURES, weights=[weights.get(f, 0.1) for f in FEATURES], intercept=-1.0, **widths)


def scores_by_label(model: FusedModel, features, k: int) -> list[dict[int, float]]:
    preds = model.predict(features, k=k)
    return [
        {int(i): float(s) for i, s in zip(row, scores) if i >= 0} for row, scores in zip(preds.labels, preds.scores)
    ]


def test_labels_added_later_leave_the_fitted_labels_scores(fused_bundle):
    predictor = load_bundle(fused_bundle).predictor
    fused = predictor.model
    features = predictor.featurizer.transform(TEXTS)
    widths = {"tree_candidates": 4, "index_candidates": 4}
    n = fused.index.n_labels
    before = FusedModel(fused.tree, fused.encoder, fused.index, rank_reading_fusion(**widths))
    grown = fused.index.added(fused.encoder.encode_labels([LATER_WORDS, "python module pip package"]))
    after = FusedModel(fused.tree, fused.encoder, grown, rank_reading_fusion(**widths, fitted_labels=n))
    old, new = scores_by_label(before, features, n), scores_by_label(after, features, n + 2)
    for was, now in zip(old, new):
        assert {i: s for i, s in now.items() if i < n} == was  # the same labels, the same scores
    assert max(new[0], key=new[0].get) == n  # the added ocean label leads for its own words
    # without the record of the fitted labels, the added ones would have taken places in the index's list
    unaware = FusedModel(fused.tree, fused.encoder, grown, rank_reading_fusion(**widths))
    moved = scores_by_label(unaware, features, n + 2)
    assert any({i: s for i, s in m.items() if i < n} != was for m, was in zip(moved, old))
