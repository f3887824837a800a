"""Numba decoration in one place: on-disk caching when a cache directory is writable, never a hard failure."""

from __future__ import annotations

import warnings

import numba

# Every compiled kernel (the engine's and the trainer's), so warm-up can turn caching off on all of them if
# saving a cache entry fails.
KERNELS: list = []


def njit(**options):
    """numba.njit(nogil=True, cache=True, **options), falling back to no cache where none can be written.

    Numba refuses `cache=True` at decoration time when no cache directory is writable (a read-only
    install and no NUMBA_CACHE_DIR); the kernels then compile in memory at warm-up instead.
    """

    def wrap(func):
        try:
            kernel = numba.njit(nogil=True, cache=True, **options)(func)
        except RuntimeError:  # "cannot cache function ...: no locator available"
            kernel = numba.njit(nogil=True, cache=False, **options)(func)
        KERNELS.append(kernel)
        return kernel

    return wrap


def disable_caching(kernels: list | None = None) -> None:
    """Compile in memory from now on: a cache directory that became unwritable raises OSError on save."""
    from numba.core.caching import NullCache

    for kernel in KERNELS if kernels is None else kernels:
        kernel._cache = NullCache()  # numba's own "no cache" object (what cache=False installs)
    warnings.warn("xtag.models.engine: numba cache directory not writable, compiling in memory", stacklevel=2)
