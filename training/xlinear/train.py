"""XR-Linear trainer: one-vs-all linear rankers per tree level, each trained on its parent's shortlist.

The solver is scikit-learn's liblinear (dual coordinate descent for squared hinge, or liblinear's
logistic regression): the same proven solver PECOS re-implements. Sibling groups are trained in
forked worker processes (see train_level for why not threads).
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.svm import LinearSVC
from tqdm.auto import tqdm

from models.beam_search import RankerLevel, TreeIndex, beam_search
from models.label_tree import ClusterChain
from models.xlinear.model import RankerConfig, XLinearModel, load_level, save_level
from training.tree import build_tree, pifa_embeddings
from training.xlinear.config import XLinearConfig


def _fit_node(
    X: sp.csr_matrix, y: np.ndarray, config: XLinearConfig, sample_weight: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, float]:
    """Train one node's binary ranker; returns its pruned weights (indices, values) and bias."""
    if y.all() or not y.any():  # one class only: a constant ranker with a margin-sized bias
        return np.empty(0, np.int32), np.empty(0, np.float32), 1.0 if y.all() else -1.0
    if config.loss == "squared-hinge":
        clf = LinearSVC(
            C=config.C,
            loss="squared_hinge",
            dual=True,
            tol=config.tol,
            max_iter=config.max_iter,
            random_state=config.tree.seed,
        )  # liblinear shuffles; seeded for reproducible runs
    else:
        clf = LogisticRegression(
            C=config.C, solver="liblinear", tol=config.tol, max_iter=config.max_iter, random_state=config.tree.seed
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(X, y, sample_weight=sample_weight)
    w = clf.coef_.ravel()
    keep = np.flatnonzero(np.abs(w) >= config.threshold)
    return keep.astype(np.int32), w[keep].astype(np.float32), float(clf.intercept_[0])


def _parent_mask(X, Y_parent, model_levels, tree, t, config) -> sp.csc_matrix:
    """Which training documents each parent node sees (eq. 7-8: true parents and/or the matcher's top)."""
    n = X.shape[0]
    if t == 1:
        return sp.csc_matrix(np.ones((n, 1), dtype=np.float32))
    masks = []
    if config.negatives in ("tfn", "tfn+man"):
        masks.append(Y_parent)
    if config.negatives in ("man", "tfn+man"):
        k = config.man_k or config.beam_size
        pred = beam_search(X, model_levels, tree, config.beam_size, k, config.post_processor, stop_level=t - 1)
        rows, cols = np.nonzero(pred.labels >= 0)
        masks.append(
            sp.csr_matrix((np.ones(len(rows), np.float32), (rows, pred.labels[rows, cols])), shape=Y_parent.shape)
        )
    M = masks[0] if len(masks) == 1 else masks[0] + masks[1]
    return M.tocsc()


# Data of the level being trained, inherited by forked workers (copy-on-write, never pickled).
_LEVEL: dict = {}


def _node_task(node: int, Xp: sp.csr_matrix, rows: np.ndarray) -> tuple:
    """Targets (and cost-sensitive weights) of one node on its parent's rows, then the fit."""
    Ytc, Rc, config, neg_weight = _LEVEL["Ytc"], _LEVEL["Rc"], _LEVEL["config"], _LEVEL["neg_weight"]
    y = np.zeros(len(rows), dtype=bool)
    pos = Ytc.indices[Ytc.indptr[node] : Ytc.indptr[node + 1]]
    y[np.searchsorted(rows, pos[np.isin(pos, rows)])] = True
    weight = None
    if Rc is not None:
        weight = np.full(len(rows), neg_weight, dtype=np.float64)
        r_rows = Rc.indices[Rc.indptr[node] : Rc.indptr[node + 1]]
        r_vals = Rc.data[Rc.indptr[node] : Rc.indptr[node + 1]]
        seen = np.isin(r_rows, rows)
        weight[np.searchsorted(rows, r_rows[seen])] = r_vals[seen]
    return _fit_node(Xp, y, config, weight)


def _children_task(nodes: list[int], rows: np.ndarray) -> list[tuple]:
    """Fit a group of siblings; their parent's rows are sliced (and converted) once for all of them."""
    Xp = _LEVEL["X"][rows].astype(np.float64)
    return [_node_task(node, Xp, rows) for node in nodes]


def _tasks(mask: sp.csc_matrix, ptr: np.ndarray, workers: int):
    """(sibling group, parent rows): siblings split so a wide parent (the root) still spreads over workers."""
    for p in range(len(ptr) - 1):
        rows = np.sort(mask.indices[mask.indptr[p] : mask.indptr[p + 1]])
        children = list(range(ptr[p], ptr[p + 1]))
        size = max(1, math.ceil(len(children) / (2 * workers)))
        for lo in range(0, len(children), size):
            yield children[lo : lo + size], rows


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
) -> RankerLevel:
    """Fit every node of one level on the documents its parent's mask selects, in parallel processes.

    Processes rather than threads: liblinear shuffles with one process-global generator that every
    fit reseeds, so concurrent fits in threads interleave it and runs stop being reproducible (and
    liblinear's data copy holds the GIL). Forked workers inherit the level's data without pickling.
    With `relevance` (documents × nodes, the same pattern as `Yt`), the loss is cost-sensitive as in
    XR-Transformer eq. 6/9: a positive weighs its relevance value, a negative `neg_weight`.
    """
    n_nodes, d = Yt.shape[1], X.shape[1]
    workers = config.n_jobs or os.cpu_count() or 1
    _LEVEL.update(
        X=X,
        Ytc=Yt.tocsc(),
        Rc=relevance.tocsc() if relevance is not None else None,
        config=config,
        neg_weight=neg_weight,
    )
    results: list = [None] * n_nodes
    bar = tqdm(total=n_nodes, desc=desc, disable=not progress, unit="node")
    try:
        if workers == 1 or "fork" not in mp.get_all_start_methods():
            done = ((nodes, _children_task(nodes, rows)) for nodes, rows in _tasks(mask, ptr, 1))
            for nodes, fitted in done:
                results[nodes[0] : nodes[-1] + 1] = fitted
                bar.update(len(nodes))
        else:
            with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("fork")) as pool:
                futures = {
                    pool.submit(_children_task, nodes, rows): nodes for nodes, rows in _tasks(mask, ptr, workers)
                }
                for future in as_completed(futures):
                    nodes = futures[future]
                    results[nodes[0] : nodes[-1] + 1] = future.result()
                    bar.update(len(nodes))
    finally:
        _LEVEL.clear()
        bar.close()
    lengths = np.array([len(r[0]) for r in results])
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    W = sp.csr_matrix(
        (np.concatenate([r[1] for r in results]), np.concatenate([r[0] for r in results]), indptr), shape=(n_nodes, d)
    )
    return RankerLevel(W=W, bias=np.array([r[2] for r in results], dtype=np.float32))


def train_xlinear(
    X: sp.csr_matrix,
    Y: sp.csr_matrix,
    config: XLinearConfig,
    checkpoint_dir: Path | None = None,
    progress: bool = True,
    log: Callable[[dict], None] = lambda event: None,
) -> XLinearModel:
    """Build the label tree (PIFA + balanced k-means) and train its rankers level by level.

    With `checkpoint_dir`, the tree and each finished level are saved there and reused on resume.
    """
    X = X.tocsr().astype(np.float32)
    chain_path = checkpoint_dir / "chain.npz" if checkpoint_dir else None
    if chain_path and chain_path.exists():
        chain = ClusterChain.load(chain_path)
        log({"event": "resume", "what": "tree"})
    else:
        start = time.perf_counter()
        chain = build_tree(pifa_embeddings(X, Y), config.tree, progress=progress)
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
    tree = TreeIndex(chain)
    levels: list[RankerLevel] = []
    for t in range(1, chain.depth + 1):
        ckpt = checkpoint_dir / f"level_{t}.npz" if checkpoint_dir else None
        if ckpt and ckpt.exists():
            levels.append(load_level(ckpt))
            log({"event": "resume", "what": f"level {t}"})
            continue
        start = time.perf_counter()
        Yt = chain.level_targets(Y, t)
        mask = _parent_mask(X, chain.level_targets(Y, t - 1) if t > 1 else None, levels, tree, t, config)
        level = train_level(X, Yt, mask, chain.ptrs[t - 1], config, desc=f"level {t}/{chain.depth}", progress=progress)
        levels.append(level)
        log(
            {
                "event": "level",
                "level": t,
                "nodes": level.n_nodes,
                "nnz": int(level.W.nnz),
                "seconds": time.perf_counter() - start,
            }
        )
        if ckpt:
            save_level(level, ckpt)
    ranker_config = RankerConfig(
        post_processor=config.post_processor, beam_size=config.beam_size, n_features=X.shape[1]
    )
    return XLinearModel(chain, levels, ranker_config)


@dataclass
class XLinearResult:
    """A finished XR-Linear run: the model as the bundle stores it."""

    model: XLinearModel

    def save(self, folder: Path) -> None:
        self.model.save(folder)

    def summary(self) -> dict:
        return {"features": self.model.config.n_features}


def train(
    texts: list[str],
    X: sp.csr_matrix,
    Y: sp.csr_matrix,
    config,
    checkpoint_dir: Path,
    progress: bool = True,
    log: Callable[[dict], None] = lambda event: None,
) -> XLinearResult:
    """The family's entry in the registry: rankers on the run's TF-IDF (the texts are not needed again)."""
    return XLinearResult(train_xlinear(X, Y, config.xlinear, checkpoint_dir=checkpoint_dir, progress=progress, log=log))
