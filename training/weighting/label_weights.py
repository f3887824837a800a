"""Per-label positive weights of the missing-label losses (Schultheis thesis ch. 3, eq. 3.13-3.14).

Under missing labels (a relevant label j is observed with propensity p_j), the re-weighted one-vs-all
surrogate of eq. 3.13 keeps negatives at weight 1 and multiplies the loss of an observed positive of
label j by w_j⁺·c_j⁺:

- ``propensity``:        w_j⁺ = 2/p_j − 1 (the unbiased 0-1 loss, shifted, then upper-bounded; eq. 3.11
  with c⁺ = 1), c_j⁺ = 1;
- ``unbiased-balanced``: the same w_j⁺ times Cui et al.'s class-balanced c_j⁺ = (1 − β)/(1 − β^{n_j}) (eq. 3.14).

Deviation from the thesis, stated: the scale of c⁺ is arbitrary (Cui et al. normalise it; eq. 3.14 does
not say), and raw c⁺ ≈ 1 − β for every label with n_j ≫ 1/(1 − β) would turn head labels' positives
into near-nothing against their negatives. With ``normalise_balance`` (default) c⁺ is rescaled so that
an observed positive has mean c⁺ 1 (Σ_j n_j c_j⁺ = Σ_j n_j): class balancing then moves weight from
head to tail labels without changing the positives' total weight against the negatives. w⁺ is never
rescaled for the linear rankers: its scale is what makes the loss unbiased.

Deep models (the transformer heads) use `head_weights`, which also normalises the product (see there).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr
from xtag.models.errors import XtagError
from xtag.models.label_tree import ClusterChain
from xtag.models.propensity import DEFAULT_A, DEFAULT_B, propensities_for, read_propensity_file

Weighting = Literal["none", "propensity", "unbiased-balanced"]
WEIGHTED_LOSSES: tuple[str, ...] = ("propensity", "unbiased-balanced")


class MissingLabelsConfig(BaseModel):
    """The run's missing-label loss (its own config section: every family reads it), with the propensity model
    and class balancing behind it. Runs saved before this section existed kept it as `xlinear.missing_labels`
    and the weighting as `xlinear.loss`; TrainConfig moves them here on load, so they still `--resume`."""

    model_config = ConfigDict(extra="forbid")

    weighting: Weighting = Field(
        "none",
        description="none | propensity (observed positives weighted w+ = 2/p - 1) | unbiased-balanced "
        "(propensity times the class-balanced c+ = (1 - beta)/(1 - beta^n), thesis eq. 3.14)",
    )
    A: float = Field(DEFAULT_A, gt=0, description="Jain et al. propensity parameter A")
    B: float = Field(DEFAULT_B, ge=0, description="Jain et al. propensity parameter B")
    beta: float = Field(0.99, ge=0, lt=1, description="class-balancing β of c⁺ = (1 − β)/(1 − β^n) (eq. 3.14)")
    normalise_balance: bool = Field(
        True, description="rescale c⁺ so an observed positive has mean c⁺ 1 (deviation from eq. 3.14, see docs)"
    )
    propensity_file: Path | None = Field(
        None, description="per-label propensities (JSON {label: p} or `label<TAB>p` lines); others use the formula"
    )
    _names: list[str] | None = PrivateAttr(None)

    def bind_labels(self, names: Sequence[str]) -> MissingLabelsConfig:
        """Tell the config the run's label names (column order of Y), which a propensity file is keyed by."""
        self._names = list(names)
        return self

    @property
    def label_names(self) -> list[str] | None:
        """The run's label names once bound (a re-ranker maps them onto its first stage's labels)."""
        return self._names

    def propensities(self, Y: sp.spmatrix) -> tuple[np.ndarray, int]:
        """p_j for every column of the training labels Y, and how many came from the propensity file."""
        freq = np.asarray((Y != 0).sum(axis=0)).ravel().astype(np.float64)
        given, names = None, self._names
        if self.propensity_file is not None:
            if names is None or len(names) != Y.shape[1]:
                raise XtagError("a propensity file needs the run's label names (train with `xtag train`)")
            given = read_propensity_file(self.propensity_file)
        return propensities_for(names or [], freq, Y.shape[0], self.A, self.B, given)


class LabelWeights(NamedTuple):
    """Per-label w⁺c⁺ of a missing-label loss, the label frequencies they were derived from, facts for the log."""

    weights: np.ndarray
    freq: np.ndarray
    facts: dict


def label_positive_weights(Y: sp.csr_matrix, config: MissingLabelsConfig) -> LabelWeights | None:
    """The configured missing-label loss's per-label weights (None without a weighting)."""
    if config.weighting == "none":
        return None
    freq = np.asarray((Y != 0).sum(axis=0)).ravel().astype(np.float64)
    p, from_file = config.propensities(Y)
    w = positive_weights(config.weighting, p, freq, config.beta, config.normalise_balance)
    facts = {
        "loss": config.weighting,
        "propensities_from_file": from_file,
        "weight_min": round(float(w.min()), 4) if len(w) else None,
        "weight_max": round(float(w.max()), 4) if len(w) else None,
        "weight_mean_per_positive": round(float((freq * w).sum() / max(freq.sum(), 1.0)), 4),
    }
    return LabelWeights(w, freq, facts)


def class_balance(frequencies: np.ndarray, beta: float) -> np.ndarray:
    """Cui et al.'s c_j⁺ = (1 − β)/(1 − β^{n_j}) = 1 / (effective number of samples); 1 at n_j ≤ 1 or β = 0."""
    n = np.maximum(np.asarray(frequencies, dtype=np.float64), 1.0)
    if beta == 0:
        return np.ones_like(n)
    return (1.0 - beta) / -np.expm1(n * np.log(beta))  # 1 − β^n without cancellation for β near 1


def positive_weights(
    kind: str, propensity: np.ndarray, frequencies: np.ndarray, beta: float = 0.99, normalise_balance: bool = True
) -> np.ndarray:
    """w_j⁺·c_j⁺ of eq. 3.13 per label (ones for ``none``); module docstring for the normalisation."""
    p = np.asarray(propensity, dtype=np.float64)
    if kind == "none":
        return np.ones_like(p)
    if kind not in WEIGHTED_LOSSES:
        raise XtagError(f"unknown label weighting {kind!r}; use none or one of {', '.join(WEIGHTED_LOSSES)}")
    if np.any(~(p > 0)) or np.any(p > 1):
        raise XtagError("propensities must lie in (0, 1]")
    w = 2.0 / p - 1.0  # eq. 3.14's w⁺; 1 when a label never goes missing
    if kind == "unbiased-balanced":
        n = np.asarray(frequencies, dtype=np.float64)
        c = class_balance(n, beta)
        if normalise_balance and (n * c).sum() > 0:
            c = c * (n.sum() / (n * c).sum())
        w = w * c
    return w


def head_weights(weights: np.ndarray, frequencies: np.ndarray) -> np.ndarray:
    """The positive weights deep heads train with: `weights` rescaled so an observed positive weighs 1 on average.

    The thesis (§3.2) only says deep models need "an additional normalization step" because the raw
    factors make training unstable. Ours: divide by the occurrence-weighted mean, Σ_j n_j u_j = Σ_j n_j,
    so the loss keeps the scale of plain BCE / squared hinge (the optimiser's learning rates, warm-up
    and clipping stay tuned) while the ratios between labels, which carry the unbiasedness and the
    balancing, are those of eq. 3.13. This is also applied to ``propensity`` (w⁺ alone).
    """
    w = np.asarray(weights, dtype=np.float64)
    n = np.asarray(frequencies, dtype=np.float64)
    total = (n * w).sum()
    return w * (n.sum() / total) if total > 0 else w


def head_label_weights(Y: sp.csr_matrix, config: MissingLabelsConfig) -> LabelWeights | None:
    """The run's missing-label weights as the transformer heads train with them: per label, `head_weights`
    of w⁺c⁺ (its facts add their maximum, `head_max`); None without a weighting. Tree levels above the labels
    take `level_positive_weights` of these, as the rankers do of theirs."""
    weighted = label_positive_weights(Y, config)
    if weighted is None:
        return None
    u = head_weights(weighted.weights, weighted.freq)
    return LabelWeights(u, weighted.freq, {**weighted.facts, "head_max": round(float(u.max()), 4)})


def node_weights(weights: np.ndarray, frequencies: np.ndarray, leaf_node: np.ndarray, n_nodes: int) -> np.ndarray:
    """A tree level's per-node positive weight from its labels' weights (XR-Linear and XR-Transformer levels).

    A node's positives are the documents with at least one of its labels. Its weight is the mean weight
    of the (document, label) positives it gathers, Σ_{j∈node} n_j u_j / Σ_{j∈node} n_j: the weight a
    positive of this cluster carries on average under the label-level loss, so a cluster of tail labels
    is pulled up as much as its labels are and the beam keeps it. `leaf_node[j]` is label j's node.
    """
    w = np.asarray(weights, dtype=np.float64)
    n = np.maximum(np.asarray(frequencies, dtype=np.float64), 0.0)
    mass = np.bincount(leaf_node, weights=n, minlength=n_nodes)
    weighted = np.bincount(leaf_node, weights=n * w, minlength=n_nodes)
    plain = np.bincount(leaf_node, weights=w, minlength=n_nodes) / np.maximum(
        np.bincount(leaf_node, minlength=n_nodes), 1
    )
    return np.where(mass > 0, weighted / np.where(mass > 0, mass, 1.0), plain)


def level_positive_weights(chain: ClusterChain, label_w: np.ndarray, freq: np.ndarray, t: int) -> np.ndarray:
    """Level t's per-node positive weights: at the leaves the labels' own, above them `node_weights`'s
    occurrence-weighted mean over the cluster's labels (a cluster positive's mean label-level weight)."""
    return node_weights(label_w, freq, chain.ancestors(t), chain.level_size(t))
