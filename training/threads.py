"""How many threads the compiled training kernels use when the user asks for all cores (n_jobs = 0)."""

from __future__ import annotations

import os


def cpu_count() -> int:
    """The cores this process may run on (its affinity mask, as a container or taskset sets it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
