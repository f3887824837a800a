"""LaMP's cross-fitting folds as Ray tasks (`xtag train --model lamp --ray ADDRESS`, issue 40).

Locally the K first-stage copies train one after the other (training/lamp/cross_fit.py); here each fold is one
Ray task on whichever node has a CPU free, running the same `fold_candidates` as the local path, so a fold's
candidates are the local run's for the same seed. The texts and their labels go into the object store once and
every task gets a reference to them, not a copy of its own; a task sends back only its fold's top-C. A task
trains in a temporary folder of its node (the nodes need not share a disk) and keeps nothing there, so when a
worker dies mid-fold Ray runs the task again from the start and the retry gives the same candidates.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm
from xtag.models.errors import XtagError
from xtag.training.lamp.fold_copy import FoldRecipe, fold_candidates

RETRIES = 3  # a fold whose worker or node dies runs again, up to this many times


def train_fold(
    recipe: FoldRecipe, texts: list[str], Y: sp.csr_matrix, rows: np.ndarray, C: int, train_and_export, ids=None
):
    """One fold in a Ray worker: (labels, scores, seconds) of its held-out `rows`."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="xtag-lamp-fold-") as folder:
        got = fold_candidates(recipe, texts, Y, rows, C, Path(folder) / "fold", train_and_export, False, ids)
    return (*got, time.perf_counter() - start)


def folds_on_ray(
    address: str,
    recipe: FoldRecipe,
    texts: list[str],
    Y: sp.csr_matrix,
    fold: np.ndarray,
    todo: list[int],
    C: int,
    train_and_export: Callable[[Any, Path, bool], Path],
    progress: bool,
    log: Callable[[dict], None],
    ids: list[str] | None = None,
) -> Iterator[tuple[int, np.ndarray, np.ndarray, float]]:
    """(k, labels, scores, seconds) of each fold in `todo` as its task ends, the folds trained on the cluster at
    `address` (seconds: the fold's own time in its task)."""
    from xtag.cluster.connect import ray_cluster

    folds = int(fold.max()) + 1
    with ray_cluster(address) as cluster:
        import ray

        task = ray.remote(num_cpus=1, max_retries=RETRIES)(train_fold)
        texts_ref, Y_ref, ids_ref = ray.put(texts), ray.put(Y), ray.put(ids)  # once, whatever the number of folds
        pending = {}
        for k in todo:
            rows = np.flatnonzero(fold == k)
            where = f" (a Ray task on {address}: {cluster.nodes} nodes, {cluster.cpus} CPUs)"
            log(recipe.start_event(k, folds, len(texts) - len(rows), len(rows), where))
            pending[task.remote(recipe, texts_ref, Y_ref, rows, C, train_and_export, ids_ref)] = k
        with tqdm(total=len(todo), desc="LaMP folds on Ray", unit="fold", disable=not progress) as bar:
            while pending:
                [ref], _ = ray.wait(list(pending), num_returns=1)
                k = pending.pop(ref)
                labels, scores, seconds = _result(ray, ref, k, address, list(pending))
                bar.update()
                yield k, labels, scores, seconds


def _result(ray, ref, k: int, address: str, others: list) -> tuple:
    """The fold's result; a failed fold cancels the others and is one line: the fold's own XtagError, or what
    Ray reports (a worker that died more than RETRIES times, say)."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayError as exc:
        for other in others:
            ray.cancel(other)
        cause = getattr(exc, "cause", None)
        if isinstance(cause, XtagError):
            raise XtagError(str(cause)) from None
        first_line = str(cause or exc).strip().splitlines()[0] if str(cause or exc).strip() else type(exc).__name__
        raise XtagError(f"lamp.cross_fit on Ray {address}: fold {k + 1} failed ({first_line})") from None
