"""XR-Linear inference: xtag.models.inference.beam_search (numpy) vs xtag.models.engine (Numba), same bundle, same features, one run.

    .venv/bin/python -m bench.experiments.engine_vs_numpy                      # debtags and debdeps, bundles cached in /tmp
    .venv/bin/python -m bench.experiments.engine_vs_numpy --corpus debtags --bundle debtags=bundles/debtags-xl
    .venv/bin/python -m bench.experiments.engine_vs_numpy --dense-dims 384         # + a synthetic Φ_cat embedding block

Trains the default XR-Linear with the public API where no bundle is given or cached, featurises the test
split once (vectorisation is excluded from every timing), then reports single-document p50/p99 latency,
batch throughput over the whole test split, and whether both return the same top-10. Prints JSON (and
writes it with --out); it does not write bench/results/, which needs a table builder first.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import time
from pathlib import Path

import numba
import numpy as np
import scipy.sparse as sp
import xtag.models.inference.beam_search as numpy_search
from xtag.models.bundle.loader import load_bundle
from xtag.models.engine import CompiledLevels, engine_beam_search, warm_up

from bench.helpers.timing import percentiles

ROOT = Path(__file__).resolve().parents[2]
K = 10


def ensure_bundle(corpus: str, data: Path, cache: Path) -> Path:
    """The cached bundle of `corpus`, trained (default XR-Linear) and exported first if missing."""
    from xtag.training.config import TrainConfig
    from xtag.training.export.export_run import export_run
    from xtag.training.run import train_run

    bundle = cache / corpus / "bundle"
    if not (bundle / "manifest.json").exists():
        run = cache / corpus / "run"
        if not (run / "model").exists():
            train_run(TrainConfig(corpus=data / corpus / "train.jsonl.gz", model="xlinear"), run, progress=False)
        export_run(run, bundle, overwrite=True)
    return bundle


def texts_of(path: Path) -> list[str]:
    with gzip.open(path, "rt") as f:
        return [json.loads(line)["text"] for line in f]


def agreement(ref, got) -> dict:
    finite = np.isfinite(ref.scores) & np.isfinite(got.scores)
    return {
        "rows_identical": round(float((ref.labels == got.labels).all(1).mean()), 5),
        "label_sets_identical": round(float(np.mean([set(a) == set(b) for a, b in zip(ref.labels, got.labels)])), 5),
        "padding_identical": bool((np.isfinite(ref.scores) == np.isfinite(got.scores)).all()),
        "max_abs_score_diff": float(np.abs(ref.scores[finite] - got.scores[finite]).max(initial=0.0)),
    }


def stable_top_k_positions(key: np.ndarray, k: int) -> np.ndarray:
    """top_k_positions as its docstring states it (ties keep column order): argpartition does not keep it."""
    return np.argsort(-key, axis=1, kind="stable")[:, :k]


class PhiCatModel:
    """A trained model's rankers with a random dense tail appended, predicting on SplitFeatures as Φ_cat does."""

    def __init__(self, model, levels):
        self.levels, self.chain, self.config, self.first_level = levels, model.chain, model.config, None
        self.tree, self.n_labels = numpy_search.TreeIndex(model.chain), model.n_labels

    def predict(self, X, k: int = 10):
        return numpy_search.beam_search(X, self.levels, self.tree, self.config.beam_size, k, self.config.post_processor)


def with_dense_tail(model, X, dims: int, seed: int = 0):
    """(Φ_cat-like model, SplitFeatures rows): TF-IDF ‖ a random unit embedding, rankers ‖ random dense weights."""
    rng = np.random.default_rng(seed)
    n, d = X.shape
    levels = []
    for level in model.levels:
        tail = sp.csr_matrix(rng.normal(0, 0.05, size=(level.n_nodes, dims)).astype(np.float32))
        wide = numpy_search.RankerLevel(sp.hstack([level.W, tail], format="csr"), level.bias)
        wide.set_dense_tail(d)
        levels.append(wide)
    E = rng.normal(size=(n, dims)).astype(np.float32)
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    Xs = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(n, d + dims))
    return PhiCatModel(model, levels), SplitRows(Xs, E, d)


class SplitRows(numpy_search.SplitFeatures):
    """SplitFeatures whose row i (`X[i]`) is a one-document SplitFeatures, like the plain CSR rows."""

    def __getitem__(self, i):
        if isinstance(i, slice):
            return SplitRows(self.sparse[i], self.dense[i], self.start)
        if isinstance(i, int | np.integer):
            return SplitRows(self.sparse[i], self.dense[i : i + 1], self.start)
        return super().__getitem__(i)


def bench_corpus(name: str, bundle_path: Path, data: Path, args) -> dict:
    bundle = load_bundle(bundle_path)
    model = bundle.predictor.model
    X = bundle.predictor.featurizer.transform(texts_of(data / name / "test.jsonl.gz"))
    beam, post = model.config.beam_size, model.config.post_processor
    if args.dense_dims:
        model, X = with_dense_tail(model, X, args.dense_dims)
    start = time.perf_counter()
    compiled = CompiledLevels.build(model.levels, model.chain)
    build_s = time.perf_counter() - start
    out = {
        "corpus": name,
        "bundle": str(bundle_path),
        "labels": model.n_labels,
        "test_docs": X.shape[0],
        "levels": [lvl.n_nodes for lvl in model.levels],
        "ranker_nnz": int(sum(lvl.W.nnz for lvl in model.levels)),
        "beam_size": beam,
        "k": K,
        "post_processor": post,
        "first_level_index": model.first_level is not None,
        "engine_build_s": round(build_s, 3),
        "engine_layout_mb": round(compiled.nbytes / 2**20, 1),
    }

    def engine(x, threads=None):
        return engine_beam_search(x, compiled, beam, K, post, first_level=model.first_level, threads=threads)

    # Batch throughput over the whole test split (numpy first, then the engine with each thread count).
    start = time.perf_counter()
    ref = model.predict(X, k=K)
    out["batch_numpy_docs_s"] = round(X.shape[0] / (time.perf_counter() - start), 1)
    for threads in sorted({1, args.threads}):
        engine(X[:64], threads)
        start = time.perf_counter()
        got = engine(X, threads)
        out[f"batch_engine_docs_s_threads{threads}"] = round(X.shape[0] / (time.perf_counter() - start), 1)
    out["agreement_vs_numpy"] = agreement(ref, got)
    original = numpy_search.top_k_positions
    numpy_search.top_k_positions = stable_top_k_positions  # only for this check, after the timings
    try:
        out["agreement_vs_numpy_stable_ties"] = agreement(model.predict(X, k=K), got)
    finally:
        numpy_search.top_k_positions = original

    # Single documents, rows sliced beforehand; both paths interleaved so they see the same machine load.
    rows = [X[i] for i in range(min(args.single, X.shape[0]))]
    for x in rows[:20]:
        model.predict(x, k=K), engine(x)
    t_numpy, t_engine = [], []
    for x in rows:
        start = time.perf_counter()
        model.predict(x, k=K)
        t_numpy.append(time.perf_counter() - start)
        start = time.perf_counter()
        engine(x)
        t_engine.append(time.perf_counter() - start)
    out["single_numpy"], out["single_engine"] = percentiles(t_numpy), percentiles(t_engine)
    t_alone = []  # the engine alone, document after document (warmer caches than interleaved with numpy)
    for x in rows:
        start = time.perf_counter()
        engine(x)
        t_alone.append(time.perf_counter() - start)
    out["single_engine_back_to_back"] = percentiles(t_alone)
    if args.dense_dims:  # the alternative to the in-kernel dot products: every node's dense score by BLAS
        D = np.vstack([lvl.dense for lvl in model.levels])
        one = X.dense[:1]
        start = time.perf_counter()
        for _ in range(20):
            one @ D.T
        out["blas_all_nodes_one_doc_ms"] = round((time.perf_counter() - start) / 20 * 1e3, 4)
        rows = min(X.shape[0], 512)
        start = time.perf_counter()
        X.dense[:rows] @ D.T
        out["blas_all_nodes_batch_docs_s"] = round(rows / (time.perf_counter() - start), 1)
    out["speedup_single_p50"] = round(out["single_numpy"]["p50_ms"] / out["single_engine"]["p50_ms"], 2)
    out["speedup_batch"] = round(out[f"batch_engine_docs_s_threads{args.threads}"] / out["batch_numpy_docs_s"], 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--corpus", nargs="+", default=["debtags", "debdeps"])
    ap.add_argument("--bundle", action="append", default=[], help="NAME=PATH: use this bundle for corpus NAME")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/xtag-engine-bench"), help="trained bundles live here")
    ap.add_argument("--single", type=int, default=1000, help="documents timed one at a time")
    ap.add_argument("--threads", type=int, default=numba.config.NUMBA_NUM_THREADS)
    ap.add_argument("--dense-dims", type=int, default=0, help="append a random Φ_cat-style dense block this wide")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    given = dict(item.split("=", 1) for item in args.bundle)
    report = {
        "benchmark": "engine_vs_numpy",
        "cpus": os.cpu_count(),
        "numba": numba.__version__,
        "numpy": np.__version__,
        "loadavg_start": os.getloadavg(),
        "threads": args.threads,
        "dense_dims": args.dense_dims,
    }
    report["warm_up_s"] = round(warm_up(), 3)
    report["threading_layer"] = numba.threading_layer()
    report["corpora"] = [
        bench_corpus(
            name, Path(given[name]) if name in given else ensure_bundle(name, args.data, args.cache), args.data, args
        )
        for name in args.corpus
    ]
    report["loadavg_end"] = os.getloadavg()
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
