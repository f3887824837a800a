"""One thread count for every pool (issue 47, defect 8): the CPUs this process may use, from its affinity mask and
its cgroup's CPU quota (a Kubernetes pod's limit), or XTAG_THREADS; and each pool sized to it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from xtag.models import threads
from xtag.models.errors import XtagError


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _proc(tmp_path: Path, text: str) -> Path:
    _write(tmp_path / "proc_cgroup", text)
    return tmp_path / "proc_cgroup"


def test_a_pods_cgroup_v2_limit_is_the_smallest_quota_along_its_path(tmp_path):
    root = tmp_path / "cgroup"
    _write(root / "cpu.max", "max 100000\n")
    _write(root / "kubepods/pod1/cpu.max", "150000 100000\n")  # the pod's limit: 1.5 CPUs
    _write(root / "kubepods/pod1/ctr/cpu.max", "max 100000\n")  # the container sets none of its own
    proc = _proc(tmp_path, "0::/kubepods/pod1/ctr\n")
    assert threads.cgroup_cpus(proc, root) == 1.5


def test_no_quota_is_none(tmp_path):
    root = tmp_path / "cgroup"
    _write(root / "cpu.max", "max 100000\n")
    assert threads.cgroup_cpus(_proc(tmp_path, "0::/\n"), root) is None
    assert threads.cgroup_cpus(tmp_path / "no_such_file", root) is None


def test_cgroup_v1_quota_is_read_at_the_containers_root_when_the_host_path_is_not_mounted(tmp_path):
    root = tmp_path / "cgroup"
    _write(root / "cpu,cpuacct/cpu.cfs_quota_us", "200000\n")
    _write(root / "cpu,cpuacct/cpu.cfs_period_us", "100000\n")
    proc = _proc(tmp_path, "5:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n")  # host paths, unseen inside
    assert threads.cgroup_cpus(proc, root) == 2.0
    _write(root / "cpu,cpuacct/cpu.cfs_quota_us", "-1\n")  # v1's "no limit"
    assert threads.cgroup_cpus(proc, root) is None


@pytest.mark.parametrize(
    ("mask", "quota", "expected"),
    [({0, 1, 2, 3, 4, 5, 6, 7}, 1.5, 2), ({0, 1, 2, 3, 4, 5, 6, 7}, None, 8), ({3}, 4.0, 1), ({0, 1}, 0.2, 1)],
)
def test_the_count_is_the_affinity_mask_capped_by_the_quota_rounded_up(monkeypatch, mask, quota, expected):
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: mask)
    monkeypatch.setattr(threads, "cgroup_cpus", lambda: quota)
    assert threads.available_cpus({}) == expected


def test_xtag_threads_overrides_the_count_and_a_bad_value_names_the_variable(monkeypatch):
    monkeypatch.setattr(threads, "cgroup_cpus", lambda: 1.0)
    assert threads.available_cpus({"XTAG_THREADS": "3"}) == 3
    for bad in ("0", "-2", "two"):
        with pytest.raises(XtagError, match="XTAG_THREADS"):
            threads.available_cpus({"XTAG_THREADS": bad})


def test_library_variables_get_the_count_and_passive_waiting(monkeypatch):
    monkeypatch.setattr(threads, "detected_cpus", lambda: 3)
    env: dict[str, str] = {"OMP_NUM_THREADS": "7"}
    threads.set_library_defaults(env)
    assert env["OMP_NUM_THREADS"] == "7"  # a count the user set is kept
    assert env["NUMBA_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "3"
    assert (env["OMP_WAIT_POLICY"], env["KMP_BLOCKTIME"]) == ("PASSIVE", "0")
    forced = {"OMP_NUM_THREADS": "7", "XTAG_THREADS": "1", "OMP_WAIT_POLICY": "ACTIVE"}
    threads.set_library_defaults(forced)
    assert forced["OMP_NUM_THREADS"] == forced["NUMBA_NUM_THREADS"] == "1"  # XTAG_THREADS wins
    assert forced["OMP_WAIT_POLICY"] == "ACTIVE"  # an explicit wait policy is kept
    with pytest.warns(UserWarning, match="XTAG_THREADS"):
        threads.set_library_defaults(bad := {"XTAG_THREADS": "x"})
    assert bad["NUMBA_NUM_THREADS"] == "3"


POOLS = r"""
import json, os
import xtag
import faiss, numba, torch
from threadpoolctl import threadpool_info
from xtag.models import threads
from xtag.models.engine.search import share_cores
from xtag.service.app import predictor_calls
from xtag.config.settings import Settings
threads.apply()
print(json.dumps({
    "count": threads.thread_count(),
    "torch": [torch.get_num_threads(), torch.get_num_interop_threads()],
    "numba": [numba.config.NUMBA_NUM_THREADS, numba.get_num_threads(), share_cores(1)],
    "native": sorted({i["num_threads"] for i in threadpool_info()}),
    "faiss": faiss.omp_get_max_threads(),
    "service": predictor_calls(Settings(_env_file=None)),
    "wait": os.environ["OMP_WAIT_POLICY"],
}))
"""


def test_every_pool_of_a_fresh_process_gets_the_count():
    """XTAG_THREADS=1 on a machine with more CPUs stands for a quota: a fresh interpreter (the pools size themselves
    when their libraries load) imports xtag, then torch, numba and faiss."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "NUMBA_", "MKL_", "OPENBLAS"))}
    env["XTAG_THREADS"] = "1"
    done = subprocess.run([sys.executable, "-c", POOLS], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    pools = json.loads(done.stdout.strip().splitlines()[-1])
    assert pools["count"] == 1
    assert pools["torch"] == [1, 1]
    assert pools["numba"] == [1, 1, 1]
    assert pools["native"] == [1]  # every OpenMP and BLAS runtime loaded (torch's libgomp, numpy's OpenBLAS, ...)
    assert pools["faiss"] == 1
    assert pools["service"] == 1
    assert pools["wait"] == "PASSIVE"
