"""XR-Linear trainer: one-vs-all linear rankers per tree level, each trained on its parent's shortlist.

The solver is scikit-learn's liblinear (dual coordinate descent for squared hinge, or liblinear's
logistic regression): the same proven solver PECOS re-implements. liblinear releases the GIL, so
nodes are trained in parallel threads without copying the data to worker processes.
"""

from __future__ import annotations

import os
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Literal

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict, Field
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.svm import LinearSVC
from tqdm.auto import tqdm

from models.inference import PostProcessor, RankerLevel, TreeIndex, beam_search
from models.label_tree import ClusterChain
from models.xlinear import RankerConfig, XLinearModel, load_level, save_level
from training.tree import TreeConfig, build_tree, pifa_embeddings


class XLinearConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    loss: Literal["squared-hinge", "logistic"] = "squared-hinge"
    C: float = Field(1.0, gt=0, description="inverse L2 regularisation strength")
    tol: float = Field(0.1, gt=0, description="liblinear stopping tolerance")
    max_iter: int = Field(100, ge=1)
    threshold: float = Field(0.1, ge=0, description="prune weights with |w| below this")
    negatives: Literal["tfn", "man", "tfn+man"] = Field(
        "tfn", description="teacher-forced (true parents), matcher-aware (top of level above), or both")
    man_k: int | None = Field(None, ge=1, description="matcher-aware shortlist size; default: beam_size")
    beam_size: int = Field(10, ge=1)
    post_processor: PostProcessor = "l3-hinge"
    n_jobs: int = Field(0, ge=0, description="threads; 0 = all cores")
    tree: TreeConfig = Field(default_factory=TreeConfig)


def _fit_node(X: sp.csr_matrix, y: np.ndarray, config: XLinearConfig) -> tuple[np.ndarray, np.ndarray, float]:
    """Train one node's binary ranker; returns its pruned weights (indices, values) and bias."""
    if y.all() or not y.any():  # one class only: a constant ranker with a margin-sized bias
        return np.empty(0, np.int32), np.empty(0, np.float32), 1.0 if y.all() else -1.0
    if config.loss == "squared-hinge":
        clf = LinearSVC(C=config.C, loss="squared_hinge", dual=True, tol=config.tol, max_iter=config.max_iter,
                        random_state=config.tree.seed)  # liblinear shuffles; seeded for reproducible runs
    else:
        clf = LogisticRegression(C=config.C, solver="liblinear", tol=config.tol, max_iter=config.max_iter,
                                 random_state=config.tree.seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(X, y)
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
        masks.append(sp.csr_matrix((np.ones(len(rows), np.float32), (rows, pred.labels[rows, cols])),
                                   shape=Y_parent.shape))
    M = masks[0] if len(masks) == 1 else masks[0] + masks[1]
    return M.tocsc()


def train_level(X: sp.csr_matrix, Yt: sp.csr_matrix, mask: sp.csc_matrix, ptr: np.ndarray,
                config: XLinearConfig, desc: str = "", progress: bool = True) -> RankerLevel:
    """Fit every node of one level on the documents its parent's mask selects, in parallel threads."""
    n_nodes, d = Yt.shape[1], X.shape[1]
    Ytc = Yt.tocsc()
    threads = config.n_jobs or os.cpu_count() or 1
    results: list = [None] * n_nodes
    bar = tqdm(total=n_nodes, desc=desc, disable=not progress, unit="node")

    def run(node: int, Xp: sp.csr_matrix, rows: np.ndarray) -> None:
        y = np.zeros(len(rows), dtype=bool)
        pos = Ytc.indices[Ytc.indptr[node]:Ytc.indptr[node + 1]]
        y[np.searchsorted(rows, pos[np.isin(pos, rows)])] = True
        results[node] = _fit_node(Xp, y, config)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        pending = []
        for p in range(len(ptr) - 1):
            rows = np.sort(mask.indices[mask.indptr[p]:mask.indptr[p + 1]])
            Xp = X[rows].astype(np.float64)
            pending += [pool.submit(run, node, Xp, rows) for node in range(ptr[p], ptr[p + 1])]
            while len(pending) > 4 * threads:  # bounded in-flight work keeps memory flat
                pending.pop(0).result()
                bar.update(1)
        for f in pending:
            f.result()
            bar.update(1)
    bar.close()
    lengths = np.array([len(r[0]) for r in results])
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    W = sp.csr_matrix((np.concatenate([r[1] for r in results]), np.concatenate([r[0] for r in results]), indptr),
                      shape=(n_nodes, d))
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
        log({"event": "tree", "seconds": time.perf_counter() - start,
             "levels": [chain.level_size(t) for t in range(1, chain.depth + 1)]})
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
        level = train_level(X, Yt, mask, chain.ptrs[t - 1], config, desc=f"level {t}/{chain.depth}",
                            progress=progress)
        levels.append(level)
        log({"event": "level", "level": t, "nodes": level.n_nodes, "nnz": int(level.W.nnz),
             "seconds": time.perf_counter() - start})
        if ckpt:
            save_level(level, ckpt)
    ranker_config = RankerConfig(post_processor=config.post_processor, beam_size=config.beam_size,
                                 n_features=X.shape[1])
    return XLinearModel(chain, levels, ranker_config)
