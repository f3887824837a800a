#!/usr/bin/env python
"""Peer runner: PECOS XR-Linear (libpecos) on pre-featurised sparse matrices.

Run with the PECOS venv (bench/peers/setup_pecos.sh):

    bench/.venv-pecos/bin/python -m bench.peers.pecos_xlinear --workdir DIR [--threads 2]

DIR must contain X_train.npz, Y_train.npz, X_test.npz (scipy.sparse.save_npz,
CSR float32; X L2-normalised TF-IDF, Y binary). Optional Y_test.npz: if present,
P@1/3/5 are added to the result. Writes into DIR:

    pecos_result.json  timings + params
    pecos_pred.npz     indices (n x k int32, -1 padded), scores (n x k float32), best first

Training uses PECOS defaults (the README recipe): PIFA label embeddings,
hierarchical spherical k-means tree, XLinearModel.train with squared-hinge
(L2R_L2LOSS_SVC_DUAL), Cp=Cn=1, threshold 0.1, teacher-forced negatives ("tfn"),
post-processor l3-hinge.

Timing: tree_s = PIFA embedding + Indexer.gen; rankers_s = XLinearModel.train;
train_s = tree_s + rankers_s (feature extraction is excluded; it happens upstream).

Memory (this process's peak RSS, VmHWM; see peak_rss_mb for why not ru_maxrss): rss_before_train_mb
after the imports and the matrices are loaded; train_peak_rss_mb right after training (the training
process's peak, its input matrices included; bench/peers/xtag_xlinear.py reads xtag's at the same
point); peak_rss_mb at the end.

Inference uses PECOS's predict-only C++ model (save, then
XLinearModel.load(..., is_predict_only=True), default weight layout
BINARY_SEARCH_CHUNKED), which is the path PECOS recommends for real-time
inference; the Python-held model is also timed for single queries for reference.
"""

import argparse
import json
import os
import statistics
import sys
import time
from importlib.metadata import version as pkg_version

import numpy as np

from bench.helpers.peers import load_csr, peak_rss_mb, topk_arrays


def precision_at(idx, Y, ks=(1, 3, 5)):
    Y = Y.tocsr()
    out = {}
    n = Y.shape[0]
    for k in ks:
        if k > idx.shape[1]:
            continue
        hits = 0
        for i in range(n):
            row = set(Y.indices[Y.indptr[i] : Y.indptr[i + 1]].tolist())
            hits += sum(1 for j in idx[i, :k] if j >= 0 and j in row)
        out[f"p@{k}"] = hits / (n * k)
    return out


def pct(values, q):
    return float(np.percentile(np.asarray(values), q))


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--beam-size", type=int, default=10)
    ap.add_argument("--topk", type=int, default=10)
    ap.add_argument("--nr-splits", type=int, default=16)
    ap.add_argument("--max-leaf-size", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=1, help="full trainings to run; timings are the median")
    ap.add_argument("--single-n", type=int, default=1000, help="test rows for single-document latency")
    ap.add_argument("--warmup", type=int, default=20, help="untimed single queries before measuring")
    return ap.parse_args(argv)


def load_matrices(wd):
    """X_train, Y_train (binary), X_test and Y_test (None when the workdir has none), checked against each other."""
    X_tr = load_csr(os.path.join(wd, "X_train.npz"))
    Y_tr = load_csr(os.path.join(wd, "Y_train.npz"))
    X_te = load_csr(os.path.join(wd, "X_test.npz"))
    y_te_path = os.path.join(wd, "Y_test.npz")
    Y_te = load_csr(y_te_path) if os.path.exists(y_te_path) else None
    if X_tr.shape[0] != Y_tr.shape[0]:
        sys.exit(f"X_train rows {X_tr.shape[0]} != Y_train rows {Y_tr.shape[0]}")
    if X_te.shape[1] != X_tr.shape[1]:
        sys.exit(f"X_test has {X_te.shape[1]} features, X_train {X_tr.shape[1]}")
    Y_tr.data[:] = 1.0  # binary relevance
    return X_tr, Y_tr, X_te, Y_te


def train_repeats(args, X_tr, Y_tr_csc):
    """--repeats full trainings (tree, then rankers); the last model and tree, and each run's two timings."""
    from pecos.xmc import Indexer, LabelEmbeddingFactory
    from pecos.xmc.xlinear.model import XLinearModel

    pred_kwargs = dict(beam_size=args.beam_size, only_topk=args.topk, post_processor="l3-hinge")
    tree_times, ranker_times = [], []
    model = cluster_chain = None
    for r in range(max(1, args.repeats)):
        t0 = time.perf_counter()
        label_feat = LabelEmbeddingFactory.create(Y_tr_csc, X_tr, method="pifa", threads=args.threads)
        cluster_chain = Indexer.gen(
            label_feat,
            indexer_type="hierarchicalkmeans",
            nr_splits=args.nr_splits,
            max_leaf_size=args.max_leaf_size,
            seed=args.seed,
            threads=args.threads,
        )
        t1 = time.perf_counter()
        model = XLinearModel.train(
            X_tr,
            Y_tr_csc,
            C=cluster_chain,
            threads=args.threads,
            nr_splits=args.nr_splits,
            # PECOS defaults, spelled out:
            solver_type="L2R_L2LOSS_SVC_DUAL",
            Cp=1.0,
            Cn=1.0,
            threshold=0.1,
            negative_sampling_scheme="tfn",
            **pred_kwargs,
        )
        t2 = time.perf_counter()
        tree_times.append(t1 - t0)
        ranker_times.append(t2 - t1)
        print(f"[pecos] run {r + 1}: tree {t1 - t0:.3f}s  rankers {t2 - t1:.3f}s", flush=True)
    return model, cluster_chain, tree_times, ranker_times


def batch_predict(args, fast, model, X_te):
    """The whole test matrix at --threads on the predict-only model (top-k kept in the workdir), its seconds, and
    how often the Python-held model's top 1 agrees on the first 200 rows."""
    pk = dict(beam_size=args.beam_size, only_topk=args.topk, threads=args.threads)
    fast.predict(X_te[: min(64, X_te.shape[0])], **pk)  # warm-up
    t0 = time.perf_counter()
    pred = fast.predict(X_te, **pk)
    predict_batch_s = time.perf_counter() - t0
    idx, sc = topk_arrays(pred, args.topk)
    np.savez(os.path.join(args.workdir, "pecos_pred.npz"), indices=idx, scores=sc)

    # sanity: predict-only C++ model agrees with the Python-held model
    pred_py = model.predict(X_te[: min(200, X_te.shape[0])], **pk)
    idx_py, _ = topk_arrays(pred_py, args.topk)
    agree = float(np.mean(idx_py[:, 0] == idx[: idx_py.shape[0], 0]))
    return idx, predict_batch_s, agree


def single_latencies(args, m, rows):
    """Milliseconds per single-document predict (threads=1) over pre-sliced rows, after --warmup untimed ones."""
    pk1 = dict(beam_size=args.beam_size, only_topk=args.topk, threads=1)
    for i in range(min(args.warmup, len(rows))):
        m.predict(rows[i], **pk1)
    lat = []
    for x in rows:
        t = time.perf_counter()
        m.predict(x, **pk1)
        lat.append((time.perf_counter() - t) * 1e3)
    return lat


def run_params(args):
    return {
        "beam_size": args.beam_size,
        "topk": args.topk,
        "nr_splits": args.nr_splits,
        "max_leaf_size": args.max_leaf_size,
        "seed": args.seed,
        "label_embedding": "pifa",
        "indexer": "hierarchicalkmeans",
        "solver_type": "L2R_L2LOSS_SVC_DUAL",
        "Cp": 1.0,
        "Cn": 1.0,
        "threshold": 0.1,
        "negative_sampling": "tfn",
        "post_processor": "l3-hinge",
        "repeats": max(1, args.repeats),
    }


def main(argv=None):
    args = parse_args(argv)
    from pecos.xmc.xlinear.model import XLinearModel

    wd = args.workdir
    X_tr, Y_tr, X_te, Y_te = load_matrices(wd)
    Y_tr_csc = Y_tr.tocsc()
    print(
        f"[pecos] train {X_tr.shape[0]} x {X_tr.shape[1]} (nnz {X_tr.nnz}), labels {Y_tr.shape[1]} "
        f"(nnz {Y_tr.nnz}); test {X_te.shape[0]}; threads={args.threads}",
        flush=True,
    )

    rss_before_train = peak_rss_mb()
    model, cluster_chain, tree_times, ranker_times = train_repeats(args, X_tr, Y_tr_csc)
    rss_train = peak_rss_mb()
    layer_sizes = [int(c.shape[1]) for c in cluster_chain]

    # Kept in the workdir so that bench/service_latency.py --pecos can time this model's predictions
    # in the same run as the service's (pecos_predict.py).
    saved = os.path.join(wd, "pecos_model")
    model.save(saved)
    fast = XLinearModel.load(saved, is_predict_only=True)
    idx, predict_batch_s, agree = batch_predict(args, fast, model, X_te)

    # single-document latency (threads=1); rows pre-sliced so only predict() is timed
    n_single = min(args.single_n, X_te.shape[0])
    rows = [X_te[i : i + 1] for i in range(n_single)]
    lat_fast = single_latencies(args, fast, rows)
    lat_py = single_latencies(args, model, rows)

    result = {
        "pecos_version": pkg_version("libpecos"),
        "tree_s": statistics.median(tree_times),
        "rankers_s": statistics.median(ranker_times),
        "train_s": statistics.median([a + b for a, b in zip(tree_times, ranker_times)]),
        "predict_batch_s": predict_batch_s,
        "docs_per_s": X_te.shape[0] / predict_batch_s,
        "single_p50_ms": pct(lat_fast, 50),
        "single_p99_ms": pct(lat_fast, 99),
        "rss_before_train_mb": rss_before_train,
        "train_peak_rss_mb": rss_train,
        "peak_rss_mb": peak_rss_mb(),
        "threads": args.threads,
        "params": run_params(args),
        "details": {
            "inference_model": "predict-only C++ (XLinearModel.load(is_predict_only=True), BINARY_SEARCH_CHUNKED)",
            "single_n": n_single,
            "single_threads": 1,
            "single_mean_ms": float(np.mean(lat_fast)),
            "single_python_model_p50_ms": pct(lat_py, 50),
            "single_python_model_p99_ms": pct(lat_py, 99),
            "top1_agree_python_vs_predict_only": agree,
            "tree_layer_sizes": layer_sizes,
            "tree_s_runs": tree_times,
            "rankers_s_runs": ranker_times,
            "n_train": int(X_tr.shape[0]),
            "n_test": int(X_te.shape[0]),
            "n_features": int(X_tr.shape[1]),
            "n_labels": int(Y_tr.shape[1]),
            "python": sys.version.split()[0],
            "numpy": np.__version__,
        },
    }
    if Y_te is not None:
        result["metrics"] = precision_at(idx, Y_te)
    with open(os.path.join(wd, "pecos_result.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps({k: v for k, v in result.items() if k not in ("params", "details")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
