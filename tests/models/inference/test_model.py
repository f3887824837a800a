"""The Model contract (models/inference/model.py): what the Predictor asks a family's model, declared not guessed."""

import numpy as np
from xtag.models.cascadexml.model import CascadeXMLModel
from xtag.models.inference.calibration import Calibration
from xtag.models.inference.model import Model
from xtag.models.inference.predictor import Predictor
from xtag.models.inference.types import Predictions
from xtag.models.labels import LabelVocab
from xtag.models.lamp.model import LampModel
from xtag.models.lightxml.model import LightXMLModel
from xtag.models.xlinear.model import XLinearModel


class Fixed(Model):
    """A model that answers the same two labels for every text and knows nothing of re-ranking."""

    config = None
    n_labels = 3

    def predict(self, features, k=10, beam_size=None):  # no `rerank`: the Predictor must not pass one
        return Predictions(np.tile([[2, 0]], (len(features), 1)), np.tile([[0.8, 0.2]], (len(features), 1)))


class Identity:
    def transform(self, texts):
        return texts


def test_every_family_model_keeps_the_contract_and_only_lamp_reranks():
    families = [XLinearModel, LightXMLModel, CascadeXMLModel, LampModel]
    assert all(issubclass(cls, Model) for cls in families)
    assert [cls for cls in families if cls.reranks] == [LampModel]
    assert [cls for cls in families if cls.readable is not Model.readable] == [XLinearModel]


def test_a_model_that_does_not_rerank_ignores_rerank_and_keeps_its_scores_and_calibration():
    """`rerank=False` (the service's per-request flag) on a plain bundle: its own answer, calibrated as usual."""
    vocab = LabelVocab(["a", "b", "c"], [1, 1, 1], 3)
    plain = Predictor(Identity(), Fixed(), vocab)
    for rerank in (True, False):
        preds = plain.predict(["x", "y"], k=2, rerank=rerank)
        np.testing.assert_array_equal(preds.labels, [[2, 0], [2, 0]])
        np.testing.assert_array_equal(preds.scores, [[0.8, 0.2], [0.8, 0.2]])
    halved = Predictor(Identity(), Fixed(), vocab, Calibration(x=[0.0, 1.0], y=[0.0, 0.5]))
    np.testing.assert_allclose(halved.predict(["x"], k=2, rerank=False).scores, [[0.4, 0.1]])
