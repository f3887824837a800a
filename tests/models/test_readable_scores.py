"""Readable scores (models/xlinear/readable.py): the engine's ranking, no block of labels at exactly 1.0."""

import numpy as np
from xtag.models.beam_search import score_candidates
from xtag.models.bundle import load_bundle
from xtag.models.xlinear.readable import BAND

from tests.conftest import make_rows


def test_scores_keep_the_engine_order_and_spread_saturated_paths_by_margin(tiny_bundle):
    predictor = load_bundle(tiny_bundle).predictor
    model = predictor.model
    texts = [row["text"] for row in make_rows(60, seed=5)]
    X = predictor.featurizer.transform(texts)
    engine = model.predict(X, k=6)
    shown = predictor.predict(texts, k=6)

    assert np.array_equal(shown.labels, engine.labels)  # same labels, same order: P@k cannot change
    assert np.all(np.diff(shown.scores, axis=1) <= 0)  # and the scores say so
    saturated = engine.scores >= 1.0
    assert saturated.sum() >= 5 and not np.any(shown.scores >= 1.0)
    assert np.all(shown.scores[saturated] >= 1 - BAND) and np.all(shown.scores[~saturated] < 1 - BAND)
    # A saturated path scores by how far it clears the margins, from the reference scorer, level by level.
    excess = sum(
        np.maximum(0.0, score_candidates(X, level, model.chain.ancestors(t)[engine.labels]) - 1.0)
        for t, level in enumerate(model.levels, start=1)
    )
    np.testing.assert_allclose(shown.scores[saturated], (1 - BAND / (1 + excess))[saturated], rtol=1e-5)
    assert len(np.unique(shown.scores[saturated])) > 0.8 * saturated.sum()  # not one shared value
