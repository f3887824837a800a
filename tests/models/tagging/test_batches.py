"""predict_corpus (models/tagging/batches.py): a corpus predicted in batches answers as one predictor call would."""

import numpy as np
from xtag.models.bundle.loader import load_bundle
from xtag.models.tagging import batches

TEXTS = ["shooter weapons arena frag", "genome protein dna", "python script", "frag dna", "arena", "protein"]


def test_batches_join_into_the_predictors_answer(tiny_bundle, monkeypatch):
    """Evaluation's metrics must not depend on where the batches split: 6 texts in batches of 4 and 2 give the
    labels and scores of one call, calibrated or raw."""
    bundle = load_bundle(tiny_bundle)
    monkeypatch.setattr(batches, "BATCH", 4)
    for calibrated in (True, False):
        whole = bundle.predictor.predict(TEXTS, k=3, calibrated=calibrated)
        batched = batches.predict_corpus(bundle, TEXTS, 3, progress=False, calibrated=calibrated)
        np.testing.assert_array_equal(batched.labels, whole.labels)
        np.testing.assert_array_equal(batched.scores, whole.scores)


def test_no_texts_is_an_empty_answer_of_width_k(tiny_bundle):
    preds = batches.predict_corpus(load_bundle(tiny_bundle), [], 5, progress=False)
    assert preds.labels.shape == preds.scores.shape == (0, 5)
