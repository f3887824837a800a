"""`xtag warm`: compile the Numba kernels into numba's on-disk cache once, at install or image build.

Without it the first `xtag train` and every first bundle load compile them (seconds to tens of seconds).
Numba picks the cache folder: NUMBA_CACHE_DIR when set, else __pycache__ beside the installed sources when
writable, else the user's cache folder (~/.cache/numba); xtag adds no folder of its own.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from xtag.cli.options import fail
from xtag.models.errors import XtagError


def warm(
    serve_only: Annotated[
        bool, typer.Option("--serve-only", help="only the prediction engine's kernels (images that only serve)")
    ] = False,
) -> None:
    """Compile the Numba kernels into numba's cache, so the first train and serve start without the JIT."""
    from xtag.models.engine import warm_up
    from xtag.models.engine.jit import KERNELS
    from xtag.models.label_text.fusion import warm_up as warm_fusion
    from xtag.models.label_text.index import warm_up as warm_label_search

    seconds = {"serve": warm_up() + warm_label_search() + warm_fusion()}
    if not serve_only:
        from xtag.training.warm import warm_training

        seconds["train"] = warm_training()
    folders = {k._cache.cache_path for k in KERNELS}
    if None in folders:  # decorated without a cache, or warm_up() found the folder unwritable
        fail(XtagError("numba has no writable cache folder here; set NUMBA_CACHE_DIR to one and run this again"))
    compiled = sum(len(k.stats.cache_misses) for k in KERNELS)
    loaded = sum(len(k.stats.cache_hits) for k in KERNELS)
    took = ", ".join(f"{what} {s:.1f} s" for what, s in seconds.items())
    typer.echo(
        f"numba kernels: {compiled} compiled, {loaded} loaded from the cache ({took}); "
        f"cache: {os.path.commonpath(sorted(folders))}"
    )
