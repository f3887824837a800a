#!/usr/bin/env python
"""Peer runner: Omikuji's Bonsai setting on pre-featurised sparse matrices (the peers' best on debdeps).

Run with the peers' venv (bench/peers/setup_pecos.sh installs omikuji beside libpecos):

    bench/.venv-pecos/bin/python -m bench.peers.omikuji_bonsai --workdir DIR [--threads 2] [--topk 11]

DIR holds X_train.npz, Y_train.npz and X_test.npz, as for bench/peers/pecos_xlinear.py. Writes into DIR:

    omikuji_result.json  timings + params
    omikuji_pred.npz     indices (n x topk int32, -1 padded), scores (n x topk float32), best first

Bonsai = Omikuji's README setting: cluster_balanced=False, cluster_k=100, max_depth=3, the other hyper-parameters
its defaults; prediction with beam_size 10, the setting of ../shared/data/peers-debdeps.md. Omikuji trains from
its text format only, so the matrices are written to it first (its seconds reported apart, not in train_s).
"""

import argparse
import json
import os
import sys
import time
from importlib.metadata import version as pkg_version

import numpy as np

from bench.helpers.peers import load_csr, peak_rss_mb


def write_omikuji_file(path: str, X, Y) -> None:
    """The Extreme Classification Repository's text format Omikuji reads: a header, then `l1,l2 f:v f:v` lines."""
    with open(path, "w") as out:
        out.write(f"{X.shape[0]} {X.shape[1]} {Y.shape[1]}\n")
        for i in range(X.shape[0]):
            labels = ",".join(map(str, Y.indices[Y.indptr[i] : Y.indptr[i + 1]]))
            lo, hi = X.indptr[i], X.indptr[i + 1]
            feats = " ".join(f"{j}:{v:.6g}" for j, v in zip(X.indices[lo:hi], X.data[lo:hi]))
            out.write(f"{labels} {feats}\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--beam-size", type=int, default=10)
    ap.add_argument("--topk", type=int, default=11, help="kept per document (one more than 10: own ids excluded)")
    args = ap.parse_args(argv)
    import omikuji

    wd = args.workdir
    X, Y, Xt = (load_csr(os.path.join(wd, f"{n}.npz")) for n in ("X_train", "Y_train", "X_test"))
    text_path = os.path.join(wd, "omikuji_train.txt")
    t0 = time.perf_counter()
    if not os.path.exists(text_path):
        write_omikuji_file(text_path + ".tmp", X, Y)
        os.replace(text_path + ".tmp", text_path)
    export_s = time.perf_counter() - t0
    hyper = omikuji.Model.default_hyper_param()
    hyper.cluster_balanced, hyper.cluster_k, hyper.max_depth = False, 100, 3
    print(f"[omikuji] bonsai on {X.shape[0]} x {X.shape[1]}, {Y.shape[1]} labels, threads={args.threads}", flush=True)
    t0 = time.perf_counter()
    model = omikuji.Model.train_on_data(text_path, hyper, n_threads=args.threads)
    train_s = time.perf_counter() - t0
    model.init_prediction_thread_pool(1)
    idx = np.full((Xt.shape[0], args.topk), -1, np.int32)
    sc = np.zeros((Xt.shape[0], args.topk), np.float32)
    t0 = time.perf_counter()
    for i in range(Xt.shape[0]):
        lo, hi = Xt.indptr[i], Xt.indptr[i + 1]
        pairs = list(zip(Xt.indices[lo:hi].tolist(), Xt.data[lo:hi].tolist()))
        for r, (label, score) in enumerate(model.predict(pairs, beam_size=args.beam_size, top_k=args.topk)):
            idx[i, r], sc[i, r] = label, score
    predict_s = time.perf_counter() - t0
    np.savez(os.path.join(wd, "omikuji_pred.npz"), indices=idx, scores=sc)
    result = {
        "omikuji_version": pkg_version("omikuji"),
        "train_s": train_s,
        "text_export_s": export_s,
        "predict_s": predict_s,
        "docs_per_s": Xt.shape[0] / predict_s,
        "peak_rss_mb": peak_rss_mb(),
        "threads": args.threads,
        "params": {"cluster_balanced": False, "cluster_k": 100, "max_depth": 3, "beam_size": args.beam_size},
    }
    with open(os.path.join(wd, "omikuji_result.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
