"""XR-Linear on a Ray cluster: the top levels as one task, then every sub-tree below them as a task of its own.

The driver only schedules and writes: X and Y go into the object store once and every task maps them from
there (zero-copy); the top task (PIFA of all labels, the top levels' k-means and rankers) and each sub-tree
task (training/xlinear/subtrees.py) run on whichever node has a free CPU, with the engine's Numba kernels
as locally. Each finished part is saved in the run's checkpoints by the driver, so `--resume` skips it, and a
task whose worker dies is retried by Ray: every part is a pure function of X, Y and the config, so a retried
or resumed run gives the same arrays as an undisturbed local one (tests/training/xlinear/test_ray_train.py).
"""

from __future__ import annotations

import contextlib
import os
import resource
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm
from xtag.cluster.connect import ray_cluster, require_ray
from xtag.models.errors import XtagError
from xtag.models.files import index_bounds
from xtag.models.label_tree import ClusterChain
from xtag.models.xlinear.model import RankerConfig, XLinearModel
from xtag.training.tree.build import TreePlan, level_branching
from xtag.training.weighting.label_weights import LabelWeights, MissingLabelsConfig, label_positive_weights
from xtag.training.xlinear import subtrees
from xtag.training.xlinear.config import XLinearConfig
from xtag.training.xlinear.ray_parts import StreamedXLinear, load_order, load_part, save_part
from xtag.training.xlinear.train import _as_float_csr, train_xlinear

TASK_RETRIES = 3  # a task whose worker or node dies runs again elsewhere, this many times


def _csr_parts(M: sp.csr_matrix) -> dict:
    return {"data": M.data, "indices": M.indices, "indptr": M.indptr, "shape": M.shape}


def _csr(parts: dict) -> sp.csr_matrix:
    """The object store's arrays as a matrix, without a copy (they are read-only, and only read)."""
    return sp.csr_matrix((parts["data"], parts["indices"], parts["indptr"]), shape=parts["shape"], copy=False)


def _task_facts(start: float) -> dict:
    """What a task reports beside its result: its seconds, and its worker process (pid) and that process's peak
    RSS so far (VmHWM, the object store's pages of X and Y it touched included)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with contextlib.suppress(OSError), open("/proc/self/status") as fh:
        peak = next((int(line.split()[1]) / 1024 for line in fh if line.startswith("VmHWM:")), peak)
    return {
        "seconds": round(time.perf_counter() - start, 3),
        "worker_pid": os.getpid(),
        "worker_peak_rss_mb": round(peak, 1),
    }


def _threads() -> int:
    import ray

    return max(1, int(ray.get_runtime_context().get_assigned_resources().get("CPU", 1)))


def _top_task(X: dict, Y: dict, plan: TreePlan, level: int, config: XLinearConfig, weighted: LabelWeights | None):
    start = time.perf_counter()
    config = config.model_copy(update={"n_jobs": _threads()})
    order, levels = subtrees.train_top(_csr(X), _csr(Y), plan, level, config, weighted)
    return order, levels, _task_facts(start)


def _subtree_task(X: dict, Y: dict, part, labels, config: XLinearConfig, weighted: LabelWeights | None):
    start = time.perf_counter()
    config = config.model_copy(update={"n_jobs": _threads()})
    order, levels = subtrees.train_subtree(_csr(X), _csr(Y), part, labels, config, weighted)
    return order, levels, _task_facts(start)


def _check_supported(config: XLinearConfig) -> None:
    if config.negatives != "tfn":
        raise XtagError(
            f"--ray: xlinear.negatives={config.negatives} needs each level's matcher over the whole level above, "
            "which sub-trees trained apart do not have; train with --negatives tfn, or without --ray"
        )


def train_xlinear_on_ray(
    X: sp.csr_matrix,
    Y: sp.csr_matrix,
    config: XLinearConfig,
    address: str,
    checkpoint_dir: Path | None = None,
    progress: bool = True,
    log: Callable[[dict], None] = lambda event: None,
    missing_labels: MissingLabelsConfig | None = None,
) -> XLinearModel | StreamedXLinear:
    """train_xlinear's model, trained as Ray tasks on the cluster at `address` (cluster/connect.py): its rankers
    below the split stay in the sub-trees' files (ray_parts.py), in a temporary folder without `checkpoint_dir`."""
    _check_supported(config)
    levels_b = level_branching(Y.shape[1], config.tree)
    if not levels_b:  # one leaf: no tree to split
        log({"event": "warning", "message": "--ray: the labels fit one leaf cluster; trained here, without Ray"})
        return train_xlinear(X, Y, config, checkpoint_dir, progress, log, missing_labels)
    ray = require_ray()
    X, Y = _as_float_csr(X.astype(np.float32, copy=False)), Y.tocsr()
    plan = TreePlan.of(Y.shape[1], levels_b)
    weighted = label_positive_weights(Y, missing_labels or MissingLabelsConfig())
    scratch = None if checkpoint_dir else tempfile.TemporaryDirectory(prefix="xtag-ray-")
    folder = Path(checkpoint_dir or scratch.name) / "ray"
    with ray_cluster(address, num_cpus=config.n_jobs or None) as cluster:
        # X, Y and the per-label weights go into the object store once: every task maps them from there
        refs = (ray.put(_csr_parts(X)), ray.put(_csr_parts(Y)))
        weights = ray.put(weighted)
        order, top, level = _top(ray, refs, plan, config, weights, folder, cluster, log)
        parts = subtrees.split(plan, level)
        log({"event": "ray", "address": address, "nodes": cluster.nodes, "cpus": cluster.cpus, "subtrees": len(parts)})
        orders = _run_subtrees(ray, refs, parts, order, config, weights, folder, progress, log)
    for part in parts:
        order[part.lo : part.hi] = orders[part.index]
    chain = ClusterChain(plan.ptrs, order.astype(np.int64))
    beam = min(config.beam_size, index_bounds.beam_limit(chain.n_labels))
    ranker = RankerConfig(post_processor=config.post_processor, beam_size=beam, n_features=X.shape[1])
    files = [_subtree_file(folder, part) for part in parts]
    return StreamedXLinear(chain, list(top), files, len(plan.ptrs) - level, ranker, scratch)


def _subtree_file(folder: Path, part: subtrees.Subtree) -> Path:
    return folder / f"subtree_{part.index:06d}.npz"


def _top(ray, refs, plan, config, weighted, folder: Path, cluster, log) -> tuple[np.ndarray, list, int]:
    """The top levels: from the run's checkpoint, or as one task (with the split level this cluster's CPUs give)."""
    path = folder / "top.npz"
    if path.exists():
        order, levels, level = load_part(path)
        log({"event": "resume", "what": "top levels"})
        return order, levels, level
    level = subtrees.split_level(plan, cluster.cpus)
    task = ray.remote(num_cpus=1, max_retries=TASK_RETRIES)(_top_task)
    order, levels, facts = ray.get(task.remote(*refs, plan, level, config, weighted))
    log({"event": "tree", "what": "top levels", "split_level": level, "nodes": int(plan.ptrs[level - 1][-1]), **facts})
    path.parent.mkdir(parents=True, exist_ok=True)
    save_part(path, order, levels, level)
    return np.array(order), levels, level


def _run_subtrees(ray, refs, parts, order, config, weighted, folder: Path, progress: bool, log) -> dict:
    """Every sub-tree's label order: those saved by an earlier attempt, the rest from tasks. Each task's rankers
    are saved as they arrive and dropped: the driver never holds more than one sub-tree's."""
    done: dict = {}
    pending = {}
    task = ray.remote(num_cpus=1, max_retries=TASK_RETRIES)(_subtree_task)
    for part in parts:
        path = _subtree_file(folder, part)
        if path.exists():
            done[part.index] = load_order(path)
            continue
        labels = order[part.lo : part.hi]
        pending[task.remote(*refs, part, labels, config, weighted)] = part
    if done:
        log({"event": "resume", "what": f"{len(done)} of {len(parts)} sub-trees"})
    with tqdm(total=len(parts), initial=len(done), desc="sub-trees", disable=not progress, unit="sub-tree") as bar:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            part = pending.pop(ready[0])
            order_j, levels_j, facts = ray.get(ready[0])
            save_part(_subtree_file(folder, part), order_j, levels_j, part.level)
            # a copy: the result's arrays map the object store, and a view kept would pin the whole object
            done[part.index] = np.array(order_j)
            del order_j, levels_j, ready
            log({"event": "subtree", "index": part.index, "labels": part.hi - part.lo, **facts})
            bar.update(1)
    return done
