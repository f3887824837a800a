"""CascadeXML's learning-rate schedule (appendix A.2.1): cosine warm-up, constant, cosine annealing to zero."""

from __future__ import annotations

import math


def cascade_lr_factor(step: int, total: int, warmup: float, anneal: float) -> float:
    """Factor of the base rate at optimiser step `step` of `total`: the first `warmup` fraction rises along
    a half cosine from 0 to 1, the last `anneal` fraction falls along a half cosine from 1 to 0."""
    up, down = int(round(warmup * total)), int(round(anneal * total))
    if up and step < up:
        return 0.5 * (1.0 - math.cos(math.pi * (step + 1) / up))
    start = total - down
    if down and step >= start:
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (step - start) / down)))
    return 1.0
