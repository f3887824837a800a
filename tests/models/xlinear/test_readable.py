"""Readable scores (models/xlinear/readable.py): the engine's ranking, no block of labels at exactly 1.0."""

import numpy as np
from xtag.models.bundle.loader import load_bundle
from xtag.models.inference.beam_search import score_candidates
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
    # A saturated path scores by how far its summed raw margins (the engine's tie-break) exceed 1 per level,
    # computed here with the reference scorer, level by level.
    margins = sum(
        score_candidates(X, level, model.chain.ancestors(t)[engine.labels]) for t, level in enumerate(model.levels, 1)
    )
    excess = np.maximum(0.0, margins - model.chain.depth)
    np.testing.assert_allclose(shown.scores[saturated], (1 - BAND / (1 + excess))[saturated], rtol=1e-5)
    assert len(np.unique(shown.scores[saturated])) > 0.8 * saturated.sum()  # not one shared value


def test_a_few_pairs_and_many_pairs_score_the_same(tiny_bundle, monkeypatch):
    from xtag.models.xlinear import readable

    predictor = load_bundle(tiny_bundle).predictor
    texts = [row["text"] for row in make_rows(80, seed=6)]
    looped = predictor.predict(texts, k=8).scores
    monkeypatch.setattr(readable, "LOOP_MAX_PAIRS", 0)  # every batch through the sparse product
    np.testing.assert_allclose(predictor.predict(texts, k=8).scores, looped, rtol=1e-6)


def test_the_engine_returns_each_paths_summed_margins_and_readable_scores_use_them(tiny_bundle):
    from xtag.models.inference.types import Predictions
    from xtag.models.xlinear.readable import readable_scores

    predictor = load_bundle(tiny_bundle).predictor
    model = predictor.model
    X = predictor.featurizer.transform([row["text"] for row in make_rows(60, seed=7)])
    engine = model.predict(X, k=6)
    found = engine.labels >= 0
    reference = sum(
        score_candidates(X, level, model.chain.ancestors(t)[np.maximum(engine.labels, 0)])
        for t, level in enumerate(model.levels, 1)
    )
    np.testing.assert_allclose(engine.margins[found], reference[found], rtol=1e-5, atol=1e-5)
    rescored = readable_scores(model, X, Predictions(labels=engine.labels, scores=engine.scores))  # no margins
    np.testing.assert_allclose(readable_scores(model, X, engine).scores, rescored.scores, rtol=1e-6)
