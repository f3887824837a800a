"""Label tree and beam search at 1M labels on synthetic data: build time, memory, time per document.

    .venv/bin/python -m bench.beam_1m --labels 1000000

Label embeddings are random unit vectors (the tree builder does not care where they come from);
rankers are random sparse weight rows of the size pruned XR-Linear models have. Accuracy is not the
point here, only that the tree builds and beam search stays fast and small at this scale.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time

import numpy as np
import scipy.sparse as sp
from sklearn.preprocessing import normalize
from xtag.models.inference.beam_search import beam_search
from xtag.models.inference.types import RankerLevel, TreeIndex
from xtag.training.tree.build import TreeConfig, build_tree

from bench.helpers.results import save_result


def rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def random_rows(rng, n_rows: int, n_cols: int, nnz_per_row: int) -> sp.csr_matrix:
    indices = rng.integers(0, n_cols, size=n_rows * nnz_per_row, dtype=np.int32)
    data = rng.standard_normal(n_rows * nnz_per_row).astype(np.float32)
    indptr = np.arange(0, n_rows * nnz_per_row + 1, nnz_per_row, dtype=np.int64)
    W = sp.csr_matrix((data, indices, indptr), shape=(n_rows, n_cols))
    W.sum_duplicates()
    return W


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--labels", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=32, help="label embedding dimension")
    ap.add_argument("--features", type=int, default=100_000)
    ap.add_argument("--weights-per-node", type=int, default=40)
    ap.add_argument("--doc-nnz", type=int, default=100)
    ap.add_argument("--docs", type=int, default=500)
    ap.add_argument("--beam-size", type=int, default=10)
    ap.add_argument("--result-name", default=None, help="bench/results/<name>.json (default: beam_1m for 1M labels)")
    args = ap.parse_args()
    rng = np.random.default_rng(0)

    E = normalize(rng.standard_normal((args.labels, args.dim)).astype(np.float32))
    start = time.perf_counter()
    chain = build_tree(E, TreeConfig(branching=16, max_leaf_size=100), progress=True)
    tree_s = time.perf_counter() - start
    tree_rss, tree_load = rss_gb(), os.getloadavg()[0]
    sizes = [chain.level_size(t) for t in range(1, chain.depth + 1)]
    del E

    levels = []
    for n in sizes:
        W = random_rows(rng, n, args.features, args.weights_per_node)
        levels.append(RankerLevel(W, rng.standard_normal(n).astype(np.float32)))
    index = TreeIndex(chain)
    X = random_rows(rng, args.docs, args.features, args.doc_nnz)
    X = normalize(X).astype(np.float32)

    for i in range(10):
        beam_search(X[i], levels, index, args.beam_size, 10)
    times = []
    for i in range(args.docs):
        x = X[i]
        start = time.perf_counter()
        beam_search(x, levels, index, args.beam_size, 10)
        times.append(time.perf_counter() - start)
    start = time.perf_counter()
    beam_search(X, levels, index, args.beam_size, 10)
    batch_s = time.perf_counter() - start
    result = {
        "labels": args.labels,
        "tree_levels": sizes,
        "tree_build_s": round(tree_s, 2),
        "load_after_tree": tree_load,
        "peak_rss_gb_after_tree": round(tree_rss, 2),
        "ranker_nnz": int(sum(l.W.nnz for l in levels)),
        "single_p50_ms": round(float(np.percentile(times, 50)) * 1e3, 3),
        "single_p99_ms": round(float(np.percentile(times, 99)) * 1e3, 3),
        "batch_docs_per_s": round(args.docs / batch_s, 1),
        "beam_size": args.beam_size,
        "peak_rss_gb": round(rss_gb(), 2),
        "args": vars(args),
    }
    print(json.dumps(result, indent=2))
    n = args.labels
    save_result(
        args.result_name
        or "beam_" + (f"{n // 10**6}m" if n % 10**6 == 0 else f"{n // 1000}k" if n % 1000 == 0 else str(n)),
        result,
    )


if __name__ == "__main__":
    main()
