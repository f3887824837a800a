"""Which explainer a bundle gets: a re-ranking (LaMP) bundle's, which adds its attention to its first stage's
explanation, else the linear one (models/explain/linear.py). Its own module so that neither explainer imports the other's
family: the LaMP explainer builds on the linear one."""

from __future__ import annotations

from xtag.models.explain.linear import Explainer


def explainer_for(predictor):
    """The bundle's explainer; raises ExplainUnavailable when the bundle has nothing to explain with."""
    if predictor.model.reranks:
        from xtag.models.explain.lamp import LampExplainer

        return LampExplainer.for_model(predictor.model)
    return Explainer.for_predictor(predictor)
