"""XR-Linear trainer: one-vs-all linear rankers per tree level, each trained on its parent's shortlist.

The solver is liblinear's dual coordinate descent (squared hinge, or logistic) compiled with Numba
(training/xlinear/solver.py), the solver PECOS re-implements too. Each parent's rows are sliced
from X once (training/xlinear/nodes.py); its children train over that one slice, in threads (the
kernels release the GIL).
"""

from __future__ import annotations

import resource
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm
from xtag.models.bundle.components import COMPONENTS
from xtag.models.families import RunResult
from xtag.models.features.static_encoder import StaticEncoder
from xtag.models.files import index_bounds
from xtag.models.inference.types import RankerLevel
from xtag.models.label_tree import ClusterChain
from xtag.models.threads import thread_count
from xtag.models.xlinear.model import RankerConfig, XLinearModel, load_level, save_level
from xtag.training.tree.build import build_tree, pifa_embeddings
from xtag.training.tree.node_kernels import build_slice
from xtag.training.weighting.label_weights import (
    LabelWeights,
    MissingLabelsConfig,
    label_positive_weights,
    level_positive_weights,
)
from xtag.training.xlinear import nodes, solver
from xtag.training.xlinear.config import XLinearConfig


def _as_float_csr(X: sp.spmatrix) -> sp.csr_matrix:
    """CSR in float32 or float64 (as given; other types become float32), sorted and without duplicates."""
    X = X.tocsr()
    if X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float32)
    if not X.has_canonical_format:
        X = X.copy()
        X.sum_duplicates()
    return X


def _csc_arrays(M: sp.spmatrix) -> tuple[np.ndarray, ...]:
    """A documents × nodes matrix as the kernels read it: per node, its documents and values."""
    M = M.tocsc()
    return M.indptr.astype(np.int64), M.indices.astype(np.int32), M.data.astype(np.float64)


def _solver_args(config: XLinearConfig) -> tuple:
    loss = solver.LOGISTIC if config.loss == "logistic" else solver.SQUARED_HINGE
    return loss, float(config.C), float(config.tol), int(config.max_iter), config.tree.seed % 2**63, config.threshold


def _fit_node(
    X: sp.csr_matrix, y: np.ndarray, config: XLinearConfig, sample_weight: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, float]:
    """Train one node's binary ranker on all rows of X; returns its pruned weights (indices, values) and bias.

    One class only gives a constant ranker with a margin-sized bias (±1), as a level's nodes do.
    """
    X = _as_float_csr(X)
    n, d = X.shape
    y_docs = np.flatnonzero(np.asarray(y, dtype=bool)).astype(np.int32)
    r_docs, r_vals = np.empty(0, np.int32), np.empty(0, np.float64)
    if sample_weight is not None:
        r_docs, r_vals = np.arange(n, dtype=np.int32), np.asarray(sample_weight, np.float64)
    indptr = X.indptr.astype(np.int64)
    _, idx, val, bias = nodes.train_nodes(
        *(indptr, X.indices.astype(np.int32), X.data, nodes.row_sqnorm(indptr, X.data), np.arange(d, dtype=np.int32)),
        np.arange(n, dtype=np.int64),
        np.array([0], np.int64),
        *(np.array([0, len(y_docs)], np.int64), y_docs),
        *(np.array([0, len(r_docs)], np.int64), r_docs, r_vals),
        sample_weight is not None,
        1.0,
        np.empty(0, np.float64),
        *_solver_args(config),
        0,
    )
    return idx, val, float(bias[0])


def _matcher_top(X, levels, chain: ClusterChain, beam: int, k: int, post_processor: str):
    """The top-k nodes of the deepest trained level for every document, by the compiled engine the
    service uses: the tree cut below that level, its nodes standing in for labels."""
    from xtag.models.engine import CompiledLevels, engine_beam_search

    t = len(levels)
    partial = ClusterChain(ptrs=chain.ptrs[:t], leaf_labels=np.arange(chain.level_size(t), dtype=np.int64))
    return engine_beam_search(X, CompiledLevels.build(levels, partial), beam, k, post_processor)


def _parent_mask(X, Y_parent, model_levels, chain, t, config) -> sp.csc_matrix:
    """Which training documents each parent node sees (eq. 7-8: true parents and/or the matcher's top)."""
    n = X.shape[0]
    if t == 1:
        return sp.csc_matrix(np.ones((n, 1), dtype=np.float32))
    masks = []
    if config.negatives in ("tfn", "tfn+man"):
        masks.append(Y_parent)
    if config.negatives in ("man", "tfn+man"):
        k = config.man_k or config.beam_size
        pred = _matcher_top(X, model_levels, chain, config.beam_size, k, config.post_processor)
        rows, cols = np.nonzero(pred.labels >= 0)
        masks.append(
            sp.csr_matrix((np.ones(len(rows), np.float32), (rows, pred.labels[rows, cols])), shape=Y_parent.shape)
        )
    M = masks[0] if len(masks) == 1 else masks[0] + masks[1]
    return M.tocsc()


class _ParentSlices:
    """Each parent's rows of X, sliced once and shared by the work units of its children.

    The first unit of a parent builds the slice, the last one done drops it; units run in
    submission order (a parent's adjacent), so about `workers` slices are alive at a time. Also
    keeps account of the bytes that slices and the units' scratch hold, and their peak.
    """

    def __init__(self, X: sp.csr_matrix, rows: list[np.ndarray], units_left: list[int]):
        self.X, self.rows, self.left = X, rows, units_left
        self.indptr = X.indptr.astype(np.int64, copy=False)  # no copy if typed so: a task maps X from the store
        self.indices = X.indices.astype(np.int32, copy=False)
        self.lock = threading.Lock()
        self.entries: dict[int, dict] = {}
        self.bytes = self.peak = 0

    def account(self, nbytes: int) -> None:
        with self.lock:
            self.bytes += nbytes
            self.peak = max(self.peak, self.bytes)

    def _build(self, p: int) -> tuple[tuple, int]:
        rows, (n, d) = self.rows[p], self.X.shape
        if len(rows) == n:  # the root (or a parent that sees every document): X itself, no copy
            piece = (self.indptr, self.indices, self.X.data, nodes.row_sqnorm(self.indptr, self.X.data))
            piece += (np.arange(d, dtype=np.int32),)
            nbytes = piece[3].nbytes + piece[4].nbytes
        else:
            self.account(4 * d)  # the column marker, while building
            piece = build_slice(self.indptr, self.indices, self.X.data, rows, d)
            self.account(-4 * d)
            nbytes = sum(a.nbytes for a in piece)
        self.account(nbytes)
        return piece, nbytes

    def acquire(self, p: int) -> tuple:
        with self.lock:
            entry = self.entries.setdefault(p, {"lock": threading.Lock(), "slice": None, "left": self.left[p]})
        with entry["lock"]:
            if entry["slice"] is None:
                entry["slice"], entry["bytes"] = self._build(p)
        return entry["slice"]

    def release(self, p: int) -> None:
        with self.lock:
            entry = self.entries[p]
            entry["left"] -= 1
            if entry["left"] == 0:
                del self.entries[p]
                self.bytes -= entry["bytes"]


def _groups(X: sp.csr_matrix, rows: list[np.ndarray], ptr: np.ndarray, workers: int) -> list[tuple]:
    """(parent, some of its children) work units, the costliest parents first, children split by cost.

    A node costs about its parent's nonzeros per epoch; a unit is about 1/(8 × workers) of the
    level, so a parent that sees most documents (the root, or one wide cluster) spreads over the
    threads and the level does not end on one thread's long tail. Units of one parent stay
    adjacent, so only about `workers` parent slices are alive at a time.
    """
    row_nnz = np.diff(X.indptr)
    size = np.array([row_nnz[r].sum() + len(r) for r in rows], dtype=np.float64)
    n_children = np.diff(ptr)
    target = max(1.0, float(size @ n_children) / (8 * workers))
    units = []
    for p in np.argsort(-size * n_children, kind="stable"):
        children = np.arange(ptr[p], ptr[p + 1], dtype=np.int64)
        step = int(min(max(1, len(children)), max(1, target // max(size[p], 1))))
        units += [(int(p), children[lo : lo + step]) for lo in range(0, len(children), step)]
    return units


def train_level(
    X: sp.csr_matrix,
    Yt: sp.csr_matrix,
    mask: sp.csc_matrix,
    ptr: np.ndarray,
    config: XLinearConfig,
    desc: str = "",
    progress: bool = True,
    relevance: sp.csr_matrix | None = None,
    neg_weight: float = 1.0,
    stats: dict | None = None,
    pos_weight: np.ndarray | None = None,
    first_node: int = 0,
) -> RankerLevel:
    """Fit every node of one level on the documents its parent's mask selects, nodes in threads.

    A parent's rows are sliced from X once (columns renumbered to those the rows use); its children
    train over that slice in work units (`_groups`), so a wide parent (the root) still spreads over
    the threads. A node's weights depend only on its data, its id and config.tree.seed, never on the
    thread count. With `relevance` (documents × nodes, the same pattern as `Yt`), the loss is
    cost-sensitive as in XR-Transformer eq. 6/9: a positive weighs its relevance value, a negative
    `neg_weight`. `pos_weight` (one per node) multiplies each node's positives' cost on top (the
    missing-label losses, `level_positive_weights`). `stats`, when given, receives the peak bytes held
    beyond X and the model (`extra_bytes`: live parent slices plus the running units' scratch). `first_node`:
    the level's nodes are nodes first_node.. of a wider level (a sub-tree's), seeded as there.
    """
    X, mask = _as_float_csr(X), mask.tocsc()
    n_nodes, d = Yt.shape[1], X.shape[1]
    workers = config.n_jobs or thread_count()
    targets = _csc_arrays(Yt)[:2]
    weights = (
        _csc_arrays(relevance) if relevance is not None else (np.zeros(1, np.int64), np.empty(0, np.int32), np.empty(0))
    )
    args = _solver_args(config)
    pw = np.empty(0, np.float64) if pos_weight is None else np.ascontiguousarray(pos_weight, dtype=np.float64)
    if len(pw) not in (0, n_nodes):
        raise ValueError(f"{len(pw)} positive weights for {n_nodes} nodes")
    rows = [np.unique(mask.indices[mask.indptr[p] : mask.indptr[p + 1]]).astype(np.int64) for p in range(len(ptr) - 1)]
    units = _groups(X, rows, ptr, workers)
    slices = _ParentSlices(X, rows, np.bincount([p for p, _ in units], minlength=len(rows)).tolist())

    def fit(p: int, ids: np.ndarray) -> tuple:
        piece = slices.acquire(p)
        scratch = 8 * (3 * len(piece[4]) + 7 * len(rows[p]))  # w, output buffers; per-document arrays
        slices.account(scratch)
        try:
            return nodes.train_nodes(
                *piece, rows[p], ids, *targets, *weights, relevance is not None, neg_weight, pw, *args, first_node
            )
        finally:
            slices.account(-scratch)
            slices.release(p)

    results: list = [None] * len(units)
    with tqdm(total=n_nodes, desc=desc, disable=not progress, unit="node") as bar:
        if workers == 1:
            for g, (p, ids) in enumerate(units):
                results[g] = fit(p, ids)
                bar.update(len(ids))
        else:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                futures = [pool.submit(fit, p, ids) for p, ids in units]
                for g, future in enumerate(futures):
                    results[g] = future.result()
                    bar.update(len(units[g][1]))
    results = [results[g] for g in np.argsort([ids[0] for _, ids in units], kind="stable")]
    lengths = np.concatenate([np.diff(r[0]) for r in results]) if results else np.empty(0, np.int64)
    W = sp.csr_matrix(
        (
            np.concatenate([r[2] for r in results] or [np.empty(0, np.float32)]),
            np.concatenate([r[1] for r in results] or [np.empty(0, np.int32)]),
            np.concatenate([[0], np.cumsum(lengths)]),
        ),
        shape=(n_nodes, d),
    )
    if stats is not None:
        stats["extra_bytes"] = slices.peak
    return RankerLevel(W=W, bias=np.concatenate([r[3] for r in results] or [np.empty(0, np.float32)]))


def fit_chain_level(
    X_rankers: sp.csr_matrix,
    Y: sp.csr_matrix,
    chain: ClusterChain,
    t: int,
    levels: list[RankerLevel],
    config: XLinearConfig,
    weighted: LabelWeights | None,
    progress: bool = True,
    stats: dict | None = None,
    X: sp.csr_matrix | None = None,
    root: sp.csc_matrix | None = None,
    first_node: int = 0,
) -> RankerLevel:
    """Level t of `chain`'s rankers (`levels`: those above it): its targets from Y, each parent's documents
    (eq. 7-8; the matcher reads `X`, default X_rankers) and the missing-label weights, trained by train_level.

    A sub-tree's chain (training/xlinear/subtrees.py) gives `root`, the documents its root sees (one column),
    and `first_node` per level, where its nodes sit in the whole tree's level.
    """
    Yt = chain.level_targets(Y, t)
    if t == 1 and root is not None:
        mask = root
    else:
        parents = chain.level_targets(Y, t - 1) if t > 1 else None
        mask = _parent_mask(X_rankers if X is None else X, parents, levels, chain, t, config)
    return train_level(
        *(X_rankers, Yt, mask, chain.ptrs[t - 1], config),
        desc=f"level {t}/{chain.depth}",
        progress=progress,
        stats=stats,
        pos_weight=None if weighted is None else level_positive_weights(chain, weighted.weights, weighted.freq, t),
        first_node=first_node,
    )


def train_xlinear(
    X: sp.csr_matrix,
    Y: sp.csr_matrix,
    config: XLinearConfig,
    checkpoint_dir: Path | None = None,
    progress: bool = True,
    log: Callable[[dict], None] = lambda event: None,
    missing_labels: MissingLabelsConfig | None = None,
) -> XLinearModel:
    """Build the label tree (PIFA + balanced k-means) and train its rankers level by level.

    With `checkpoint_dir`, the tree and each finished level are saved there and reused on resume;
    `missing_labels` (the run's section) weights each level's positives for the missing-label losses.
    """
    X = X.tocsr().astype(np.float32)
    chain_path = checkpoint_dir / "chain.npz" if checkpoint_dir else None
    if chain_path and chain_path.exists():
        chain = ClusterChain.load(chain_path)
        log({"event": "resume", "what": "tree"})
    else:
        start = time.perf_counter()
        chain = build_tree(
            pifa_embeddings(X, Y, config.tree.pifa_weighting), config.tree, progress=progress, threads=config.n_jobs
        )
        log(
            {
                "event": "tree",
                "seconds": time.perf_counter() - start,
                "levels": [chain.level_size(t) for t in range(1, chain.depth + 1)],
            }
        )
        if chain_path:
            checkpoint_dir.mkdir(parents=True, exist_ok=True)
            chain.save(chain_path)
    weighted = label_positive_weights(Y, missing_labels or MissingLabelsConfig())
    if weighted is not None:
        log({"event": "label_weights", **weighted.facts})
    X_rankers = _as_float_csr(X)  # sorted once here, not by every level (the tree and matcher keep X as given)
    levels: list[RankerLevel] = []
    for t in range(1, chain.depth + 1):
        ckpt = checkpoint_dir / f"level_{t}.npz" if checkpoint_dir else None
        if ckpt and ckpt.exists():
            levels.append(load_level(ckpt))
            log({"event": "resume", "what": f"level {t}"})
            continue
        start = time.perf_counter()
        stats: dict = {}
        level = fit_chain_level(X_rankers, Y, chain, t, levels, config, weighted, progress=progress, stats=stats, X=X)
        levels.append(level)
        log(
            {
                "event": "level",
                "level": t,
                "nodes": level.n_nodes,
                "nnz": int(level.W.nnz),
                "seconds": time.perf_counter() - start,
                "extra_mb": round(stats["extra_bytes"] / 2**20, 1),  # slices and solver scratch at their peak
                "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            }
        )
        if ckpt:
            save_level(level, ckpt)
    beam = min(
        config.beam_size, index_bounds.beam_limit(chain.n_labels)
    )  # wider searches nothing more; load refuses it
    ranker_config = RankerConfig(post_processor=config.post_processor, beam_size=beam, n_features=X.shape[1])
    return XLinearModel(chain, levels, ranker_config)


if TYPE_CHECKING:
    from xtag.training.label_text.stage import LabelTextStage
    from xtag.training.xlinear.ray_parts import StreamedXLinear


@dataclass
class XLinearResult(RunResult):
    """A finished XR-Linear run: the model as the bundle stores it, with its static block when it has one; a Ray
    run's model keeps its lower rankers in the sub-trees' files until saved (training/xlinear/ray_parts.py)."""

    model: XLinearModel | StreamedXLinear
    static: StaticEncoder | None = None
    stage: LabelTextStage | None = None  # the label-text stage (training/label_text/stage.py), with --labels

    def save(self, folder: Path) -> None:
        self.model.save(folder)
        if self.static is not None:
            self.static.save(folder / COMPONENTS["static-encoder"].path)
        if self.stage is not None:
            self.stage.save(folder)

    def summary(self) -> dict:
        dense = {"dense_features": self.static.dim, "dense": "static"} if self.static is not None else {}
        stage = self.stage.summary() if self.stage is not None else {}
        return {"features": self.model.config.n_features, **dense, **stage}
