"""Index arrays checked against their bounds when a bundle loads: once, vectorised, naming the file and array.

The compiled kernels (models/engine/), scipy's sparse routines and FAISS read through index arrays without
checking them, so a bundle whose checksums match but whose indices are wrong (an edited file, re-hashed)
would read out of bounds at the first prediction: issue 30 set every value of rankers/engine/fm_node.npy to
50,000,000 and the server segfaulted. Every loader of an index array calls these first; a bad array is
refused with an XtagError that names it, as the NaN scan names a non-finite one. So is a number that sizes
every request's work, a bundle's default beam (`beam`).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from xtag.models.errors import XtagError

BLOCK = 1 << 24  # elements per block in the checks that walk big arrays segment by segment (bounded memory)
SMALL_BEAM = 10  # the trainers' default beam: a bundle may keep it over fewer labels (`beam` below)


def fail(name: str, problem: str) -> XtagError:
    return XtagError(f"{name}: bad index array ({problem})")


def integers(name: str, array: np.ndarray, ndim: int = 1, dtype: str | None = None) -> np.ndarray:
    """`array` if it is an integer array of `ndim` dimensions (and of exactly `dtype`, native byte order,
    when given: the kernels are compiled for one dtype per argument), else an XtagError."""
    array = np.asarray(array)
    if array.dtype.kind not in "iu" or array.ndim != ndim:
        raise fail(name, f"{array.ndim}-d {array.dtype}, expected {ndim}-d integers")
    if dtype is not None and array.dtype != np.dtype(dtype):
        raise fail(name, f"dtype {array.dtype}, expected {np.dtype(dtype)}")
    return array


def in_range(name: str, values: np.ndarray, lo: int, hi: int, what: str = "") -> None:
    """Every value in [lo, hi)."""
    if values.size == 0:
        return
    low, high = int(values.min()), int(values.max())
    if low < lo or high >= hi:
        bound = f"{lo}..{hi - 1}" if hi > lo else "nothing (no valid index)"
        raise fail(name, f"values {low}..{high}, outside {bound}{f' ({what})' if what else ''}")


def pointer(name: str, ptr: np.ndarray, length: int, size: int | None = None) -> None:
    """An indptr-like array: `size` entries (when given), starting at 0, non-decreasing, ending at `length`:
    then every range ptr[i]..ptr[i+1] lies inside the array it points into."""
    if size is not None and len(ptr) != size:
        raise fail(name, f"{len(ptr)} entries, expected {size}")
    if len(ptr) == 0 or ptr[0] != 0 or ptr[-1] != length:
        ends = f"{ptr[0]}..{ptr[-1]}" if len(ptr) else "empty"
        raise fail(name, f"a pointer array must run from 0 to {length}, this one is {ends}")
    if len(ptr) > 1 and bool((np.diff(ptr) < 0).any()):
        raise fail(name, f"decreases at position {int(np.argmax(np.diff(ptr) < 0)) + 1}")


def equal(name: str, array: np.ndarray, expected: np.ndarray, what: str) -> None:
    """An array fully determined by others (the tree's shape) must be exactly what they give."""
    if array.shape != expected.shape or not np.array_equal(array, expected):
        raise fail(name, f"does not match {what}")


def permutation(name: str, values: np.ndarray, n: int) -> None:
    """The values are 0..n-1, each once."""
    if len(values) != n:
        raise fail(name, f"{len(values)} entries, expected {n}")
    in_range(name, values, 0, n)
    if n and bool((np.bincount(values, minlength=n) != 1).any()):
        raise fail(name, f"not a permutation of 0..{n - 1} (an id repeats)")


def beam_limit(n: int, floor: int = SMALL_BEAM) -> int:
    """The widest default beam a bundle choosing among `n` things may hold (`beam`); trainers cap theirs at it."""
    return max(n, floor)


def beam(
    name: str, field: str, value: int, n: int, floor: int = SMALL_BEAM, what: str = "the bundle's label count"
) -> None:
    """A bundle's default beam (or candidate count, or search breadth) is at most the `n` things it chooses
    from, or `floor` (the trainers' default) where they are fewer: a wider one searches nothing more, yet every
    request that names no beam of its own would pay for it (a beam_size of 10^9 in a bundle loaded, issue 38)."""
    limit = beam_limit(n, floor)
    if value > limit:
        raise XtagError(f"{name}: {field} {value} is above {what} ({n}); at most {limit}")


def segment_blocks(ptr: np.ndarray, block: int = BLOCK) -> Iterator[tuple[int, int]]:
    """Consecutive segment ranges (s0, s1) of an already checked pointer array, each spanning about `block`
    elements (one segment more than that when it is bigger by itself): big arrays checked a block at a time."""
    n = len(ptr) - 1
    s0 = 0
    while s0 < n:
        s1 = int(np.searchsorted(ptr, ptr[s0] + block, side="right")) - 1
        s1 = min(max(s1, s0 + 1), n)
        yield s0, s1
        s0 = s1


def segment_ids(ptr: np.ndarray, s0: int, s1: int) -> np.ndarray:
    """For each element of segments s0..s1-1, the index of its segment."""
    return np.repeat(np.arange(s0, s1), np.diff(ptr[s0 : s1 + 1]))
