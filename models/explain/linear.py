"""Why a label was returned: its path through the label tree, and the TF-IDF terms that moved each level's margin.

An XR-Linear label's score is Π_t post(m_t) over its ancestors, one per tree level (models/inference/beam_search.py),
and each level's margin is linear in the text's features: m_t = Σ_j x_j·w_{node,j} + b_node. So a margin
splits exactly into one contribution per feature present in the text: each TF-IDF term (its TF-IDF value
× the node's weight), Φ_cat's dense block as one number (`dense`: an embedding is not words), and the bias.
Each level lists its largest positive term contributions; `other_terms` is what all its other terms add
(negative ones included), so that bias + Σ terms + other_terms + dense = margin within float rounding,
and Π post(margin) = `path_score`, the engine's score before the displayed score's monotone maps
(models/xlinear/readable.py, a calibration). `words` ranks terms by their contribution summed over the
levels of the path: the words the dashboard highlights.

Only rankers that read TF-IDF features can be explained this way (XR-Linear, XR-Transformer's Φ_cat);
LightXML and CascadeXML score from a transformer alone, so explaining them raises ExplainUnavailable
(the service answers 422). A LaMP bundle (models/explain/lamp.py) adds, per label, two more fields beside its
first stage's `words`: `attended_words` ([{term, weight}], its feature-to-label attention) and
`supporting_labels` ([{id, name, weight}], its label-to-label attention); models/explain/select.py picks the explainer.

Explaining featurises the texts again rather than keeping the features of the prediction, so that the
plain path carries nothing for it (issue 25: explain off costs nothing); for Φ_cat that reruns the encoder.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xtag.models.errors import XtagError
from xtag.models.features.tfidf import TfidfFeaturizer
from xtag.models.inference.beam_search import POST_PROCESSORS
from xtag.models.inference.stopping import check
from xtag.models.xlinear.model import XLinearModel
from xtag.models.xlinear.readable import as_csr, path_nodes, shared_features

TOP_TERMS = 5  # terms listed per level and per label
DIGITS = 6  # decimals kept in the payload: sums hold within a few 1e-6


def rounded(value: float) -> float:
    """`value` to DIGITS decimals, a rounded-away tiny negative as 0.0, not -0.0 (JSON showed "other_terms": -0.0)."""
    return round(value, DIGITS) + 0.0


class ExplainUnavailable(XtagError):
    """The bundle's scores are not linear in TF-IDF features, so there are no words to credit."""


@dataclass
class _Level:
    """One node's share of one document: the features both have, and their products x_j·w_j."""

    features: np.ndarray
    products: np.ndarray
    bias: float


class Explainer:
    """Explanations for a predictor's returned labels; built once per loaded bundle (`for_predictor`)."""

    def __init__(self, featurizer, tfidf: TfidfFeaturizer, model: XLinearModel):
        self.featurizer, self.model, self.n_terms = featurizer, model, tfidf.dim
        self.vocabulary = tfidf.vocabulary
        self.post = POST_PROCESSORS[model.config.post_processor]
        self.dense = model.config.dense_features > 0
        self._terms: np.ndarray | None = None

    @classmethod
    def for_predictor(cls, predictor) -> Explainer:
        """Raises ExplainUnavailable unless the predictor's rankers are linear over TF-IDF (+ an optional dense block)."""
        featurizer, model = predictor.featurizer, predictor.model
        tfidf = featurizer.tfidf
        if not isinstance(model, XLinearModel) or not isinstance(tfidf, TfidfFeaturizer):
            raise ExplainUnavailable(
                "this bundle has no TF-IDF features to explain its scores with: explanations need linear rankers "
                "over TF-IDF (XR-Linear, XR-Transformer); LightXML and CascadeXML score from a transformer alone"
            )
        return cls(featurizer, tfidf, model)

    @property
    def terms(self) -> np.ndarray:
        """Feature column → term, built on the first explanation (a vocabulary can hold millions of terms)."""
        if self._terms is None:
            terms = np.empty(self.n_terms, dtype=object)
            terms[np.fromiter(self.vocabulary.values(), np.int64, len(self.vocabulary))] = list(self.vocabulary)
            self._terms = terms
        return self._terms

    def explain(
        self, texts: list[str], labels: list[list[int]], top: int = TOP_TERMS, rerank: bool = True
    ) -> list[list[dict]]:
        """For each text, one explanation per label id of `labels` (its returned labels), in that order
        (`rerank` is for re-ranking bundles' explainers: a bundle that does not re-rank ignores it)."""
        X = as_csr(self.featurizer.transform(list(texts)))
        nodes = path_nodes(self.model)
        out = []
        for d, row in enumerate(labels):
            check()  # one document at k = 595 takes up to a second: the service may stop a call between two
            shares: dict[tuple[int, int], _Level] = {}  # labels of one document share their upper nodes
            explained = []
            for label in row:
                path = [(t, int(nodes[t][label])) for t in range(len(nodes))]
                for key in path:
                    if key not in shares:
                        shares[key] = self._share(X, d, *key)
                explained.append(self._label(path, [shares[key] for key in path], top))
            out.append(explained)
        return out

    def _share(self, X, d: int, t: int, node: int) -> _Level:
        level = self.model.levels[t]
        features, x_val, w_val = shared_features(X, d, level.W, node)
        products = x_val.astype(np.float64) * w_val.astype(np.float64)
        return _Level(features.astype(np.int64), products, float(level.bias[node]))

    def _label(self, path: list[tuple[int, int]], shares: list[_Level], top: int) -> dict:
        levels, path_score, credited = [], 1.0, []
        for (t, node), share in zip(path, shares):
            is_term = share.features < self.n_terms
            features, products = share.features[is_term], share.products[is_term]
            shown = self._top(features, products, top)
            margin = share.bias + float(share.products.sum())
            score = float(self.post(margin))
            path_score *= score
            levels.append(
                {
                    "level": t + 1,
                    "node": node,
                    "margin": rounded(margin),
                    "score": round(score, DIGITS),
                    "bias": rounded(share.bias),
                    "terms": shown,
                    "other_terms": rounded(float(products.sum()) - sum(s["contribution"] for s in shown)),
                    "dense": rounded(float(share.products[~is_term].sum())) if self.dense else None,
                }
            )
            credited.append((features, products))
        ids, where = np.unique(np.concatenate([f for f, _ in credited]), return_inverse=True)
        total = np.bincount(where, weights=np.concatenate([p for _, p in credited]), minlength=len(ids))
        return {"words": self._top(ids, total, top), "path_score": round(path_score, DIGITS), "levels": levels}

    def _top(self, features: np.ndarray, values: np.ndarray, top: int) -> list[dict]:
        """The `top` largest positive contributions, largest first (ties: the lower column first, as `features`
        come sorted and the sort is stable)."""
        positive = np.flatnonzero(values > 0)
        order = positive[np.argsort(-values[positive], kind="stable")[:top]]
        terms = self.terms
        return [
            {"term": terms[j], "contribution": round(v, DIGITS)}
            for j, v in zip(features[order].tolist(), values[order].tolist())
        ]
