"""Weighted pointwise losses for the transformer families' heads (thesis eq. 3.13 on BCE / squared hinge).

Any family with a head scoring (text, label-or-cluster) pairs can train the missing-label losses with
`weighted_pointwise_loss`: negatives weigh 1 (times an optional base weight), an observed positive of
label j weighs u_j, where u comes from `xtag.training.weighting.label_weights.head_weights` (w⁺c⁺, normalised as
deep models need). `LabelWeightTable` turns the per-label (or per-cluster) weights into the tensor
a batch needs, by candidate id.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F


def pointwise_loss(scores: torch.Tensor, y: torch.Tensor, kind: str) -> torch.Tensor:
    """Element-wise BCE on logits (``bce``) or squared hinge max(0, 1 − (2y − 1)·s)² (``squared-hinge``)."""
    if kind == "bce":
        return F.binary_cross_entropy_with_logits(scores, y, reduction="none")
    if kind == "squared-hinge":
        return F.relu(1.0 - (2.0 * y - 1.0) * scores) ** 2
    raise ValueError(f"unknown pointwise loss {kind!r}")


def weighted_pointwise_loss(
    scores: torch.Tensor,
    y: torch.Tensor,
    kind: str,
    pos_weight: torch.Tensor | None = None,
    base: torch.Tensor | None = None,
) -> torch.Tensor:
    """Element-wise eq. 3.13: the loss of a positive (y = 1) times `pos_weight`, of a negative times 1.

    `pos_weight` has the shape of `scores` (the weight of each element's label, e.g. from
    `LabelWeightTable.lookup`); `base` (same shape) multiplies every element on top: padding masks,
    XR-Transformer's relevance and negative weights. Reduce (sum or mean) as the family does.
    """
    per = pointwise_loss(scores, y, kind)
    if pos_weight is not None:
        per = per * torch.where(y > 0, pos_weight.to(per.dtype), torch.ones_like(per))
    return per * base if base is not None else per


class LabelWeightTable:
    """Positive weights by label (or cluster) id, on the training device; None weights mean plain training."""

    def __init__(self, weights: np.ndarray | None, device: torch.device | str = "cpu"):
        self.table = None if weights is None else torch.as_tensor(np.asarray(weights, np.float32), device=device)

    def lookup(self, ids: torch.Tensor) -> torch.Tensor | None:
        """The weights of the ids (any shape; padding ids just need to be valid), or None when unweighted."""
        return None if self.table is None else self.table[ids]

    def full(self, batch: int) -> torch.Tensor | None:
        """The weights of every id, as a batch × ids tensor (heads that score all clusters at once)."""
        return None if self.table is None else self.table.expand(batch, -1)
