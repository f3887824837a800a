"""engine_beam_search: xtag.models.inference.beam_search.beam_search's contract, run by the compiled kernels."""

from __future__ import annotations

import os
import threading

import numba
import numpy as np
import scipy.sparse as sp
from xtag.models.engine.kernels import search_parallel, search_range, workspace
from xtag.models.engine.layout import CompiledLevels
from xtag.models.engine.scoring import POST_IDS
from xtag.models.inference.beam_search import POST_PROCESSORS, top_k_positions
from xtag.models.inference.types import FirstLevelSearch, PostProcessor, Predictions, SplitFeatures
from xtag.models.threads import thread_count

# A chunk is scored by walking its features against the document's dense scatter when it has at most
# this many features per document feature, else by looking each document feature up in its hash (PECOS
# picks one per model). On debtags and debdeps chunks are far larger than documents, so the hash nearly
# always wins and 0, 1, 4 or 16 here measured the same; the scatter serves small chunks and long documents.
SCATTER_RATIO = 4.0
# Batches are cut into this many ranges per thread, handed out one at a time, so uneven documents and
# threads that share their core with other work still balance.
BLOCKS_PER_THREAD = 8
# Below this many documents a batch runs on the calling thread: a pool launch costs more.
PARALLEL_MIN_DOCS = 4
# numba's fallback thread pool (workqueue, used when neither TBB nor OpenMP is present) aborts the process
# on concurrent launches from two Python threads: serialise launches until the layer is known to be safe.
_POOL_LOCK = threading.Lock()
_POOL_SAFE = [False]
# GNU OpenMP (numba's "omp" layer) aborts a forked child that launches the pool its parent used (a user's
# multiprocessing pool, a forking server). A child of a process that used the pool therefore runs every batch on its calling thread.
_POOL_USED = [False]
_SERIAL_ONLY = [False]
os.register_at_fork(after_in_child=lambda: _SERIAL_ONLY.__setitem__(0, _POOL_USED[0]))


def share_cores(calls: int) -> int:
    """Let this thread's later engine calls use 1/`calls` of numba's threads (at least one), and return that.

    For a caller that runs `calls` predictions at once, each on its own Python thread (the service's worker
    threads): they then split the cores instead of each launching a pool as wide as the machine. numba's
    thread count is per calling thread, so other threads keep theirs."""
    threads = max(1, min(numba.config.NUMBA_NUM_THREADS, thread_count()) // max(calls, 1))
    numba.set_num_threads(threads)
    return threads


def _c(a, dtype) -> np.ndarray:
    """C-contiguous, writeable, of `dtype`: one numba type per argument, so warm-up compiled what runs."""
    a = np.ascontiguousarray(a, dtype=dtype)
    return a if a.flags.writeable else a.copy()


def _csr_arrays(X):
    """(indptr, indices, data) of a scipy matrix or xtag.models.inference.types.CsrArrays, in the kernels' dtypes."""
    if not hasattr(X, "indptr"):
        X = sp.csr_matrix(X, dtype=np.float32)
    elif sp.issparse(X) and X.format != "csr":
        X = X.tocsr()
    return _c(X.indptr, np.int64), _c(X.indices, np.int32), _c(X.data, np.float32)


def _prepare(X, compiled: CompiledLevels):
    """(indptr, indices, data) of the columns the chunks cover, the dense tail block, the joined CSR or None."""
    n = X.shape[0]
    start = compiled.dense_start
    if isinstance(X, SplitFeatures) and X.start == start:  # Φ_cat blocks as the featuriser made them
        if X.dense.shape != (n, compiled.dims):  # the kernels read dims values of each row unchecked
            raise ValueError(
                f"dense block of shape {X.dense.shape}, the rankers' dense tail has {compiled.dims} columns"
            )
        return (*_csr_arrays(X.sparse), _c(X.dense, np.float32), None)
    joined = X.tocsr() if isinstance(X, SplitFeatures) else X
    indptr, indices, data = _csr_arrays(joined)
    if start is None:
        return indptr, indices, data, np.zeros((n, 0), np.float32), joined
    # A joined Φ_cat matrix: move the tail columns into a dense block (xtag.models.inference.beam_search._split_dense).
    tail = indices >= start
    rows = np.repeat(np.arange(n), np.diff(indptr))
    dense = np.zeros((n, compiled.dims), np.float32)
    dense[rows[tail], indices[tail] - start] = data[tail]
    head_ptr = np.concatenate(([0], np.cumsum(np.bincount(rows[~tail], minlength=n)))).astype(np.int64)
    return head_ptr, _c(indices[~tail], np.int32), _c(data[~tail], np.float32), dense, joined


def _first_level(first_level: FirstLevelSearch, X, joined, m: int, post_processor: str):
    """Level 1 from an index, in numpy exactly as xtag.models.inference.beam_search does it: the starting beam."""
    cand, raw = first_level.search(X.tocsr() if joined is None else joined, m)
    with np.errstate(invalid="ignore"):
        combined = np.where(cand >= 0, POST_PROCESSORS[post_processor](raw), -np.inf).astype(np.float32)
    margin = np.zeros(cand.shape) + raw
    pos = top_k_positions(combined.astype(np.float64) + 1e-9 * np.tanh(margin), m)
    rows = np.arange(cand.shape[0])[:, None]
    nodes, scores, margins = cand[rows, pos], combined[rows, pos], margin[rows, pos]
    return _c(np.where(np.isfinite(scores), nodes, -1), np.int64), _c(scores, np.float32), _c(margins, np.float64)


def _local_workspace(compiled: CompiledLevels, cap: int) -> tuple:
    """This thread's buffers for `compiled` (grown when a larger beam or k asks for more)."""
    local = compiled.local
    ws = getattr(local, "ws", None)
    if ws is None or ws[0].size < cap:
        ws = local.ws = workspace(
            cap, max(compiled.max_width, 1), compiled.n_features, compiled.max_feature_major_nodes
        )
    return ws


# "Start at the root" for the kernels: no starting-beam rows.
_ROOT = (np.zeros((0, 1), np.int64), np.zeros((0, 1), np.float32), np.zeros((0, 1), np.float64))
_NO_MAP = np.zeros(0, np.int64)


def _launch(args: tuple, sizes: tuple, blocks: int, out: tuple) -> None:
    # Dynamic scheduling, one block at a time: with numba's default (equal static shares) one descheduled
    # thread (a busy shared machine) holds the whole batch back.
    _POOL_USED[0] = True
    with numba.parallel_chunksize(1):
        if _POOL_SAFE[0]:
            search_parallel(*args, sizes, blocks, *out)
            return
        with _POOL_LOCK:
            search_parallel(*args, sizes, blocks, *out)
            _POOL_SAFE[0] = numba.threading_layer() != "workqueue"


def engine_beam_search(
    X,
    compiled: CompiledLevels,
    beam_size: int,
    k: int,
    post_processor: PostProcessor = "l3-hinge",
    stop_level: int | None = None,
    first_level: FirstLevelSearch | None = None,
    threads: int | None = None,
    scatter_ratio: float = SCATTER_RATIO,
) -> Predictions:
    """xtag.models.inference.beam_search.beam_search on CompiledLevels: same arguments, same labels, scores and padding.

    `threads` caps numba's pool for this call (default: numba.get_num_threads(), at most
    xtag.models.threads.thread_count(), the CPUs this process may use); a batch of fewer than PARALLEL_MIN_DOCS
    documents, threads=1, or any batch in a forked child of a process that used the pool, runs on the calling thread. The kernels release the GIL: concurrent calls from Python threads run side by side.
    """
    if post_processor not in POST_IDS:
        raise ValueError(f"unknown post-processor {post_processor!r}")
    if beam_size < 1 or k < 1:
        raise ValueError(f"beam_size and k must be at least 1, got {beam_size} and {k}")
    last = stop_level or compiled.depth
    if not 1 <= last <= compiled.depth:
        raise ValueError(f"stop_level {stop_level} outside 1..{compiled.depth}")
    n = X.shape[0]
    indptr, indices, data, dense, joined = _prepare(X, compiled)
    leaf = _NO_MAP if stop_level is not None else compiled.leaf_labels
    t_start, init = 1, _ROOT
    if first_level is not None:
        init, t_start = _first_level(first_level, X, joined, k if last == 1 else beam_size, post_processor), 2
    if t_start > last:  # stopped at level 1 of an index: the index's top k are the answer
        nodes = np.full((n, k), -1, np.int64)
        scores = np.full((n, k), -np.inf, np.float32)
        margins = np.zeros((n, k), np.float64)
        m = min(k, init[0].shape[1])
        nodes[:, :m], scores[:, :m], margins[:, :m] = init[0][:, :m], init[1][:, :m], init[2][:, :m]
        if leaf.size:
            nodes = np.where(nodes >= 0, leaf[np.maximum(nodes, 0)], -1)
        return Predictions(labels=nodes, scores=scores, margins=margins)
    nodes, scores = np.empty((n, k), np.int64), np.empty((n, k), np.float32)
    margins = np.empty((n, k), np.float64)
    # No level has more than `widest` nodes, so a wider beam or k keeps the same nodes: capping them changes
    # no answer (the kernel pads the k columns), and keeps the workspace sized by the model, not the request.
    beam_size, k_run = min(beam_size, compiled.widest), min(k, compiled.widest)
    cap = max(beam_size, k_run, init[0].shape[1])
    P = (float(scatter_ratio), t_start, last, int(beam_size), int(k_run), POST_IDS[post_processor])
    args = (compiled.arrays, P, leaf, indptr, indices, data, dense, init)
    wanted = min(numba.get_num_threads(), thread_count()) if threads is None else threads
    threads = max(1, min(wanted, numba.config.NUMBA_NUM_THREADS))
    if n < PARALLEL_MIN_DOCS or threads == 1 or _SERIAL_ONLY[0]:
        search_range(*args, 0, n, _local_workspace(compiled, cap), nodes, scores, margins)
    else:
        previous = numba.get_num_threads()
        numba.set_num_threads(threads)  # thread-local in numba: other callers keep their own count
        try:
            sizes = (cap, max(compiled.max_width, 1), compiled.n_features, compiled.max_feature_major_nodes)
            _launch(args, sizes, min(n, threads * BLOCKS_PER_THREAD), (nodes, scores, margins))
        finally:
            numba.set_num_threads(previous)
    return Predictions(labels=nodes, scores=scores, margins=margins)
