"""Where the label index (models/label_text/index.py) should switch from exact to HNSW: one query's search time,
flat against HNSW, and HNSW's recall@20 against the exact top 20, by label count, at the encoder's dimension.

    .venv/bin/python -m bench.experiments.label_index_threshold --dim 256

Random unit vectors (the search cost depends on the count and dimension, not on the texts; random vectors are
HNSW's hardest case for recall); single queries, as the service sends them, median of --queries. With --bundle and
--texts, the bundle's own label embeddings and those texts' embeddings instead, at its label count: HNSW's recall on
real embeddings. Prints JSON; the threshold is the count where the two cross.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
from xtag.models.label_text.index import LabelIndex, LabelIndexConfig


def unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def cases(args, rng: np.random.Generator):
    """(label count, label embeddings, queries) to measure: random ones per count, or one bundle's own."""
    if args.bundle is None:
        for n in (int(c) for c in args.counts.split(",")):
            yield n, unit(rng, n, args.dim), unit(rng, args.queries, args.dim)
        return
    from xtag.corpus.files import load_corpus
    from xtag.models.bundle.loader import load_bundle

    model = load_bundle(args.bundle).predictor.model
    texts = load_corpus(args.texts).texts[: args.queries]
    yield model.index.n_labels, model.index.embeddings, model.encoder.encode_documents(texts)


def median_ms(index: LabelIndex, queries: np.ndarray, k: int) -> float:
    times = []
    for q in queries:
        start = time.perf_counter()
        index.search(q[None, :], k)
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--counts", default="1000,2000,4000,8000,16000,32000,64000")
    parser.add_argument("--bundle", type=Path, help="a bundle with the label-text stage (dense encoder)")
    parser.add_argument("--texts", type=Path, help="a corpus whose first --queries texts are the queries")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    for n, labels, queries in cases(args, rng):
        flat = LabelIndex.build(labels, np.zeros(n), LabelIndexConfig(exact_max_labels=n))
        hnsw = LabelIndex.build(labels, np.zeros(n), LabelIndexConfig(exact_max_labels=0))
        exact, _ = flat.search(queries, 20)
        found, _ = hnsw.search(queries, 20)
        recall = np.mean([len(set(a) & set(b)) / 20 for a, b in zip(exact, found)])
        row = {
            "labels": n,
            "dim": int(labels.shape[1]),
            "flat_ms": median_ms(flat, queries, 20),
            "hnsw_ms": median_ms(hnsw, queries, 20),
        }
        rows.append({**row, "hnsw_recall20": round(float(recall), 3)})
        print(json.dumps(rows[-1]), flush=True)
    print(json.dumps({"load": os.getloadavg()[0], "rows": rows}))


if __name__ == "__main__":
    main()
