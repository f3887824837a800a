#!/usr/bin/env python
"""Peer runner: PECOS's batch prediction alone, on a saved model and a pre-featurised matrix.

Run with the PECOS venv (bench/peers/setup_pecos.sh), on the model pecos_xlinear.py keeps in its workdir:

    bench/.venv-pecos/bin/python -m bench.peers.pecos_predict --model DIR/pecos_model --X X.npz [--threads 2]

Loads the predict-only C++ model (as pecos_xlinear.py times it), warms it up, then times one predict
call on the whole matrix per round and prints {"predict_s": [...], "predict_cpu_s": [...], "documents": n}
as one JSON line.
bench/service_latency.py --pecos adds its own TF-IDF time to this, so that PECOS's in-process
throughput includes vectorising, as the service's does.
"""

import argparse
import json
import time

import numpy as np
import scipy.sparse as smat


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--X", required=True, help="CSR float32 .npz (scipy.sparse.save_npz)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--beam-size", type=int, default=10)
    ap.add_argument("--topk", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args(argv)

    from pecos.xmc.xlinear.model import XLinearModel

    X = smat.load_npz(args.X).tocsr().astype(np.float32)
    X.sort_indices()
    model = XLinearModel.load(args.model, is_predict_only=True)
    kw = dict(beam_size=args.beam_size, only_topk=args.topk, threads=args.threads)
    model.predict(X[: min(64, X.shape[0])], **kw)  # warm-up, as pecos_xlinear.py's
    times, cpu = [], []
    for _ in range(args.rounds):
        t, c = time.perf_counter(), time.process_time()
        model.predict(X, **kw)
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)  # all of this process's threads
    print(json.dumps({"predict_s": times, "predict_cpu_s": cpu, "documents": X.shape[0]}))


if __name__ == "__main__":
    main()
