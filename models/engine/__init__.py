"""Compiled XR-Linear inference (Numba): chunked rankers and a beam search with xtag.models.inference.beam_search's results.

compiled = CompiledLevels.build(levels, chain)     # once per loaded model
warm_up()                                         # once per process, at load: compiles the kernels
engine_beam_search(X, compiled, beam_size, k, post_processor, stop_level, first_level, threads)
"""

from xtag.models.engine.layout import CompiledLevels
from xtag.models.engine.search import engine_beam_search
from xtag.models.engine.warmup import warm_up

__all__ = ["CompiledLevels", "engine_beam_search", "warm_up"]
