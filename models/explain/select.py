"""Which explainer a bundle gets: a re-ranking (LaMP) bundle's, which adds its attention to its first stage's
explanation, else the linear one (models/explain/linear.py). Its own module so that neither explainer imports the other's
family: the LaMP explainer builds on the linear one."""

from __future__ import annotations

from xtag.models.explain.linear import Explainer, ExplainUnavailable
from xtag.models.label_text.model import FusedModel


def explainer_for(predictor):
    """The bundle's explainer; raises ExplainUnavailable when the bundle has nothing to explain with."""
    if isinstance(predictor.model, FusedModel):
        raise ExplainUnavailable(
            "this bundle fuses its tree with the label-text stage: a fused score (the tree's score, the text cosine, "
            "the label's training frequency) has no per-term explanation; a bundle trained without --labels has one"
        )
    if predictor.model.reranks:
        from xtag.models.explain.lamp import LampExplainer

        return LampExplainer.for_model(predictor.model)
    return Explainer.for_predictor(predictor)
