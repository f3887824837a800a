"""Level-1 search: a flat FAISS index over the rankers' columns vs exact scoring in the sparse core.

    .venv/bin/python -m bench.experiments.shortlist_vs_exact [--features 100000] [--nodes 8,64,256,1024,4096]

Synthetic level-1 rankers (a fixed budget of nonzero weights spread over the nodes, as PIFA/k-means
trees spread a vocabulary) and TF-IDF-like documents (60 nonzeros); for each level size, p50 per
document of `FaissShortlist.search` (flat index, the query densified over the columns any node uses)
and of scoring every node with `score_candidates` + `top_k`, taking turns document by document.
This is what decides ShortlistConfig.min_nodes.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.sparse as sp
from xtag.models.inference.beam_search import score_candidates, top_k
from xtag.models.inference.types import RankerLevel
from xtag.models.xlinear.shortlist import FaissShortlist, ShortlistConfig

from bench.helpers.results import save_result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--features", type=int, default=100_000)
    ap.add_argument("--nodes", default="8,64,256,1024,4096")
    ap.add_argument("--weights", type=int, default=64_000, help="nonzero ranker weights in the level")
    ap.add_argument("--docs", type=int, default=50)
    ap.add_argument("--beam", type=int, default=10)
    ap.add_argument("--result-name", default="shortlist_vs_exact", help="bench/results/<name>.json")
    args = ap.parse_args()
    d = args.features
    docs = [sp.random(1, d, density=60 / d, format="csr", random_state=i, dtype=np.float32) for i in range(args.docs)]
    print("| level-1 nodes | indexed columns | exact p50 ms | flat FAISS p50 ms |\n|---:|---:|---:|---:|")
    rows = []
    for K in (int(x) for x in args.nodes.split(",")):
        W = sp.random(K, d, density=min(1.0, args.weights / (K * d)), format="csr", random_state=1, dtype=np.float32)
        level = RankerLevel(W, np.zeros(K, np.float32))
        index = FaissShortlist.build(level, d, ShortlistConfig(min_nodes=0, exact_max_nodes=K))
        nodes = np.arange(K)[None, :]
        exact, flat = [], []
        for _ in range(3):
            for x in docs:
                t = time.perf_counter()
                top_k(score_candidates(x, level, nodes), nodes, args.beam)
                exact.append(time.perf_counter() - t)
                t = time.perf_counter()
                index.search(x, args.beam)
                flat.append(time.perf_counter() - t)
        print(
            f"| {K} | {index.info.columns} | {np.median(exact) * 1e3:.3f} | {np.median(flat) * 1e3:.3f} |", flush=True
        )
        rows.append(
            {
                "nodes": K,
                "indexed_columns": int(index.info.columns),
                "exact_p50_ms": float(np.median(exact) * 1e3),
                "flat_faiss_p50_ms": float(np.median(flat) * 1e3),
            }
        )
    save_result(args.result_name, {"args": vars(args), "levels": rows})


if __name__ == "__main__":
    main()
