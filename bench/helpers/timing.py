"""Latency percentiles of a list of timed calls (from experiments/engine_vs_numpy.py)."""

from __future__ import annotations

import numpy as np


def percentiles(times: list[float]) -> dict:
    ms = np.asarray(times) * 1e3
    return {
        "p50_ms": round(float(np.percentile(ms, 50)), 4),
        "p99_ms": round(float(np.percentile(ms, 99)), 4),
        "mean_ms": round(float(ms.mean()), 4),
    }
