"""warm_up(): compile every kernel at model load on a tiny model, so no request ever waits for the JIT."""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp
from xtag.models.engine.jit import disable_caching
from xtag.models.engine.layout import CompiledLevels
from xtag.models.engine.search import PARALLEL_MIN_DOCS, engine_beam_search
from xtag.models.inference.types import RankerLevel
from xtag.models.label_tree import ClusterChain


def _tiny() -> CompiledLevels:
    chain = ClusterChain([np.array([0, 2]), np.array([0, 2, 3])], np.array([2, 0, 1]))
    rng = np.random.default_rng(0)
    levels = []
    for n in (2, 3):
        level = RankerLevel(
            sp.random(n, 6, density=0.6, random_state=rng, format="csr", dtype=np.float32),
            rng.normal(size=n).astype(np.float32),
        )
        level.set_dense_tail(4)
        levels.append(level)
    return CompiledLevels.build(levels, chain)


def _run() -> None:
    compiled = _tiny()
    X = sp.random(
        PARALLEL_MIN_DOCS, 6, density=0.5, random_state=np.random.default_rng(1), format="csr", dtype=np.float32
    )
    engine_beam_search(X[:1], compiled, beam_size=1, k=2)  # the serial kernel
    engine_beam_search(X, compiled, beam_size=1, k=2, threads=2)  # the thread-pool kernel


def warm_up() -> float:
    """Compile (or load from numba's cache) every kernel; returns the seconds it took."""
    start = time.perf_counter()
    try:
        _run()
    except OSError:  # the cache directory accepted the decoration but refused to save: compile in memory
        disable_caching()
        _run()
    return time.perf_counter() - start
