"""The process's memory as the model slots see it: RSS now, what a bundle would add, and giving freed heap back."""

from __future__ import annotations

import ctypes
import gc
import re
from pathlib import Path

from xtag.models.errors import XtagError


def release_memory() -> None:
    """Collect what a failed load left and give the freed heap back to the OS."""
    gc.collect()
    trim_heap()


def freeze_heap() -> None:
    """Move every object alive now (the imported code, the app, the models loaded at startup: about 160,000 on
    debtags) out of the garbage collector's reach for good: a full collection otherwise walks them all, on the
    GIL, whenever a request leaves enough objects behind (an explained 10 x 595 batch: 0.1-0.4 s, during which
    the event loop could not answer /health; issue 47, defect 7). Objects still go when their last reference does:
    a reloaded-away model is freed by reference counting (it holds no reference cycle)."""
    gc.collect()
    gc.freeze()


def trim_heap() -> None:
    """Give the free pages of every malloc arena back to the OS (glibc's malloc_trim; a no-op elsewhere). Freed
    memory stays resident otherwise: once glibc has freed a large mmapped block it raises its mmap threshold (up to
    32 MiB), so later buffers of that size come from the heap, whose free pages it keeps. A reloaded-away model's
    arrays are such pages too (about 2 ms for a debtags server)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def _malloc_trim():
    try:
        return ctypes.CDLL(None).malloc_trim  # the process's own C library
    except (OSError, TypeError, AttributeError):  # not glibc (or no dlopen(NULL) at all)
        return None


_MALLOC_TRIM = _malloc_trim()


def resident_mb() -> float | None:
    """This process's resident memory now (Linux /proc; None elsewhere), for the load lines."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    found = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    return round(int(found.group(1)) / 1024, 1) if found else None


class MemoryLimit(XtagError):
    """Loading the bundle would take the process past XTAG_MAX_MEMORY_MB."""


def bundle_bytes(path: Path) -> int:
    """What a bundle's files hold, an upper bound of what its arrays add to RSS once mapped and touched."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def check_memory(path: Path, limit_mb: float | None) -> None:
    """Refuse, before loading, a bundle whose files would push RSS past `limit_mb` (None: no limit)."""
    if limit_mb is None:
        return
    rss, need = resident_mb() or 0.0, bundle_bytes(path) / 2**20
    if rss + need > limit_mb:
        raise MemoryLimit(
            f"{path}: refused: loading it needs about {need:.0f} MB beside the {rss:.0f} MB resident, over "
            f"XTAG_MAX_MEMORY_MB={limit_mb:g}; unload a model first (nothing served is evicted)"
        )
