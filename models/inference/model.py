"""The contract every family's inference model keeps: the one base class the Predictor calls through.

A family's model (models/<family>/model.py) subclasses `Model`: it scores the featuriser's output and returns
top-k labels. What differs between families is declared here, with the common answer as the default, so the
Predictor asks the model instead of guessing from its attributes:
- `reranks`: the model is a second stage over a first (LaMP) and its `predict` takes `rerank`; `rerank=False`
  answers with the first stage alone;
- `readable(features, preds)`: the scores a user sees; the model's own unless they need a monotone fix-up
  (XR-Linear's hinge scores saturate at 1.0: models/xlinear/readable.py);
- `scores_labels` / `score_labels(features, labels)`: the model can score given labels of each document outside
  its search, exactly as its search would (XR-Linear: each label's path through the tree), so that a small
  `include` filter is answered exactly (models/inference/label_filter.py); other families are over-fetched;
- `cost_hint()`: which serving-cost profile the service's admission applies (service/http/cost.py), and the
  shape it needs (a re-ranker's candidates, the label tree's level sizes), so that admission never reads a
  family's internals.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from xtag.models.inference.types import Predictions


@dataclass(frozen=True)
class CostHint:
    """What a family tells the service's cost model (service/http/cost.py) about its serving work."""

    family: str = "linear"  # the fitted profile: "linear" (sparse beam search), "encoder" (a transformer), "lamp"
    candidates: int = 0  # a re-ranker's C: it re-scores the first stage's top-max(C, k) per document
    # Nodes per level of the label tree the beam search walks, root's children first (a re-ranker: its first
    # stage's); () for a model that scores every label without one.
    level_nodes: tuple[int, ...] = ()


class Model(ABC):
    """Featuriser output → top-k labels. `config.beam_size` is the default beam (for LightXML: the top clusters
    whose labels are scored)."""

    reranks: ClassVar[bool] = False
    scores_labels: ClassVar[bool] = False
    config: Any

    @property
    @abstractmethod
    def n_labels(self) -> int: ...

    @abstractmethod
    def predict(self, features: Any, k: int = 10, beam_size: int | None = None) -> Predictions: ...

    def readable(self, features: Any, preds: Predictions) -> Predictions:
        """The scores a user sees, in the same order: the model's own unless a family overrides this."""
        return preds

    def score_labels(self, features: Any, labels: list[Any]) -> Predictions:
        """Each document's `labels` scored as the search scores them, best first, padded with -1 (only where
        `scores_labels`)."""
        raise NotImplementedError(f"{type(self).__name__} scores labels only through its search")

    def cost_hint(self) -> CostHint:
        """The serving-cost profile of this family: a sparse beam search unless a family says otherwise."""
        return CostHint()
