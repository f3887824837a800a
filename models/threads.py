"""How many threads each pool of this process runs: one count, decided here, that every pool asks for.

The pools: torch's intra- and inter-op pools, the OpenMP runtimes (torch's libgomp, which MKL also runs on,
faiss's, numba's "omp" layer), OpenBLAS, numba's engine and trainer kernels, onnxruntime sessions, the
service's worker threads and the XR-Linear trainer's executors. Left alone, each sizes itself from the host's
cores (os.cpu_count()), which in a container with a CPU limit (a Kubernetes pod, `docker --cpus`) is the
node's count, not the pod's.

The count is the CPUs this process may use: its affinity mask (taskset, a cpuset), capped by its cgroup's CPU
quota (v2 `cpu.max`, v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`, the smallest along its cgroup's path, rounded
up), or `XTAG_THREADS` when set. (joblib's loky reads only the hierarchy's root file and does not walk a
cgroup's ancestors, hence this module.)

OpenMP runtimes also spin after each parallel region, waiting for the next one. On a machine shared with other
jobs the spinning threads take CPU time from the threads that have work, and LaMP's training (torch on GNU
OpenMP) collapsed to a few per cent of its steps per second (bench/RESULTS.md, "Training and serving under
contention"). So OMP_WAIT_POLICY=PASSIVE and KMP_BLOCKTIME=0 are set unless the environment
sets them. Both are read when a runtime loads, which is why `xtag/__init__.py` calls `set_library_defaults`
before anything imports torch, numba or faiss. For the same reason this is the one module of models/ that reads
the environment (the others take their options from the caller's settings).
"""

from __future__ import annotations

import functools
import math
import os
import sys
import warnings
from collections.abc import MutableMapping
from pathlib import Path

from xtag.models.errors import XtagError

ENV = "XTAG_THREADS"
# Pool sizes the libraries read from the environment when they load (numba's at import, the others at start).
COUNT_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS")
# Sleep, not spin, between parallel regions (GNU OpenMP; Intel OpenMP's block time, in ms).
WAIT_VARIABLES = {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0"}


def affinity_cpus() -> int:
    """The CPUs this process may be scheduled on (its affinity mask)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _quota_v2(folder: Path) -> float | None:
    try:
        quota, period = (folder / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    return None if quota == "max" else int(quota) / int(period)


def _quota_v1(folder: Path) -> float | None:
    try:
        quota = int((folder / "cpu.cfs_quota_us").read_text())
        period = int((folder / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota <= 0 or period <= 0 else quota / period


def cgroup_cpus(proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The CPU quota of this process's cgroup in CPUs (2.5 = 250 ms per 100 ms), the smallest of its cgroup's
    and its ancestors' (a pod's limit sits on the pod, its containers below it); None: no quota.

    Without a cgroup namespace the path in /proc/self/cgroup names the host's hierarchy, which the container
    does not see: folders that do not exist are skipped, and the mount's root (the container's own) is read."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    quotas = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and not controllers:  # v2: one unified hierarchy
            mounts, read = [root], _quota_v2
        elif "cpu" in controllers.split(","):  # v1: the cpu controller's own hierarchy
            mounts, read = [root / name for name in ("cpu", "cpu,cpuacct", "cpuacct,cpu")], _quota_v1
        else:
            continue
        parts = [p for p in path.split("/") if p]
        for mount in mounts:
            for depth in range(len(parts), -1, -1):
                quota = read(mount.joinpath(*parts[:depth]))
                if quota is not None:
                    quotas.append(quota)
    return min(quotas) if quotas else None


def detected_cpus() -> int:
    """The affinity mask's CPUs capped by the cgroup quota (rounded up), at least 1."""
    cpus, quota = affinity_cpus(), cgroup_cpus()
    return max(1, cpus if quota is None else min(cpus, math.ceil(quota)))


def available_cpus(environ: MutableMapping[str, str] = os.environ) -> int:
    """XTAG_THREADS when set, else detected_cpus()."""
    wanted = environ.get(ENV, "").strip()
    if wanted:
        try:
            value = int(wanted)
        except ValueError:
            value = 0
        if value < 1:
            raise XtagError(f"{ENV}={wanted!r}: expected a positive whole number of threads")
        return value
    return detected_cpus()


@functools.cache
def thread_count() -> int:
    """The count every pool of this process uses (cached: the quota and the mask are read once)."""
    return available_cpus()


def set_library_defaults(environ: MutableMapping[str, str] = os.environ) -> None:
    """Put the count and passive waiting into the variables the libraries read when they load. XTAG_THREADS
    overrides the per-library counts; without it a count the environment already sets is kept."""
    try:
        count, forced = available_cpus(environ), bool(environ.get(ENV, "").strip())
    except XtagError as exc:
        warnings.warn(f"{exc}; using the CPUs this process may use", stacklevel=2)  # serve and train refuse it
        count, forced = detected_cpus(), False
    for name in COUNT_VARIABLES:
        if forced or name not in environ:
            environ[name] = str(count)
    for name, value in WAIT_VARIABLES.items():
        environ.setdefault(name, value)


def apply(count: int | None = None) -> dict[str, int]:
    """Size the pools of the libraries this process has already loaded to `count` (default: thread_count()),
    for those that read their size at load from variables that came too late; returns pools().

    torch's inter-op pool can be sized only before its first use: it is left as it is after that."""
    count = count or thread_count()
    torch = sys.modules.get("torch")  # only what is loaded: sizing a pool must not import its library
    if torch is not None:
        torch.set_num_threads(count)
        if torch.get_num_interop_threads() != count:
            try:
                torch.set_num_interop_threads(count)
            except RuntimeError:  # "cannot set ... after parallel work has started"
                pass
    numba = sys.modules.get("numba")
    if numba is not None:
        numba.set_num_threads(min(count, numba.config.NUMBA_NUM_THREADS))
    if "faiss" in sys.modules:
        sys.modules["faiss"].omp_set_num_threads(count)
    from threadpoolctl import threadpool_limits

    threadpool_limits(count)  # OpenBLAS and OpenMP runtimes already loaded (numpy's, torch's libgomp)
    return pools()


def pools() -> dict[str, int]:
    """Each loaded pool's size now, by name (for logs and benchmarks)."""
    out = {"xtag": thread_count()}
    torch, numba = sys.modules.get("torch"), sys.modules.get("numba")
    if torch is not None:
        out["torch_intra_op"] = torch.get_num_threads()
        out["torch_inter_op"] = torch.get_num_interop_threads()
    if numba is not None:
        out["numba"] = numba.get_num_threads()
        out["numba_pool"] = numba.config.NUMBA_NUM_THREADS
    from threadpoolctl import threadpool_info

    for info in threadpool_info():
        out[f"{info['internal_api']}:{Path(info['filepath']).name}"] = info["num_threads"]
    return out
