"""XR-Linear trained locally and as Ray tasks on a 2-process local cluster, on the same TF-IDF matrices.

    .venv/bin/python -m bench.ray_xlinear --data bench/out/synthetic_200k --workdir bench/out/ray_xlinear_200k \\
        --result-name ray_xlinear_synthetic_200k [--ngram-max 1] [--kill-after 20]

Three trainings, each in a process of its own (its peak RSS is its own VmHWM, the model's saving included):
`train_xlinear` (2 threads), then
`train_xlinear_on_ray` as the driver of a local cluster (tests/ray_support.py: a head and a worker node of one
CPU each, so two worker processes share the same two cores), then the same with the first sub-tree task's worker
killed `--kill-after` seconds into the task. After the Ray driver has saved its model (its lower levels streamed
from the sub-trees' files), it also loads the whole model, for its peak had it gathered every ranker (before/after
in one run). Reports times, the driver's and each worker's peak RSS (the driver's also split into its private
pages and the object store's shared ones it maps, sampled every 0.1 s; workers' from
the task facts; the object store's pages of X and Y they map count in it), the per-sub-tree figures the 10M/100M
plan is derived from, whether every array of the tree and rankers is identical to the local run's, and P@1/P@5.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.helpers.results import save_result


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, required=True, help="a folder with train.jsonl.gz and test.jsonl.gz")
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--ngram-max", type=int, default=2)
    ap.add_argument("--min-df", type=int, default=2)
    ap.add_argument("--kill-after", type=float, default=None, help="seconds into a sub-tree task; none: no kill run")
    ap.add_argument("--result-name", required=True)
    ap.add_argument("--role", choices=["local", "ray"], default=None, help=argparse.SUPPRESS)
    ap.add_argument("--address", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--name", default=None, help=argparse.SUPPRESS)
    return ap.parse_args()


def trainer(args: argparse.Namespace) -> None:
    """One training in this process: the matrices, the model saved to WORKDIR/NAME, facts to WORKDIR/NAME.json."""
    import scipy.sparse as sp
    from xtag.training.xlinear.config import XLinearConfig
    from xtag.training.xlinear.ray_train import train_xlinear_on_ray
    from xtag.training.xlinear.train import train_xlinear

    from bench.helpers.peers import RssParts, peak_rss_mb

    X, Y = sp.load_npz(args.workdir / "X_train.npz").tocsr(), sp.load_npz(args.workdir / "Y_train.npz").tocsr()
    before, events, out = peak_rss_mb(), [], args.workdir / args.name
    parts = RssParts()
    start = time.perf_counter()
    if args.role == "local":
        model = train_xlinear(X, Y, XLinearConfig(n_jobs=2), progress=False, log=events.append)
    else:
        ckpt = args.workdir / f"{args.name}_checkpoints"
        shutil.rmtree(ckpt, ignore_errors=True)  # a fresh run: no part resumed from an earlier one
        model = train_xlinear_on_ray(X, Y, XLinearConfig(), args.address, ckpt, progress=False, log=events.append)
    seconds = time.perf_counter() - start
    model.save(out)  # the Ray driver streams its lower levels from the sub-trees' files here
    peak, parts = peak_rss_mb(), parts.stop()
    facts = {"seconds": round(seconds, 1), "peak_rss_mb": round(peak), "rss_before_mb": round(before), "events": events}
    facts |= {"peak_private_mb": round(parts.peak_private_mb), "peak_shared_mb": round(parts.peak_shared_mb)}
    if args.role == "ray":  # the same driver, had it gathered every ranker (as it did before it streamed them)
        whole = model.load()
        facts["gathered_peak_rss_mb"] = round(peak_rss_mb())
        del whole
    (args.workdir / f"{args.name}.json").write_text(json.dumps(facts))


def run_trainer(args: argparse.Namespace, role: str, name: str, address: str | None = None) -> dict:
    command = [sys.executable, "-m", "bench.ray_xlinear", "--data", str(args.data), "--workdir", str(args.workdir)]
    command += ["--result-name", args.result_name, "--role", role, "--name", name]
    command += ["--address", address] if address else []
    subprocess.run(command, check=True)
    return json.loads((args.workdir / f"{name}.json").read_text())


def compare(workdir: Path, a: str, b: str) -> bool:
    """Every array of the two saved models' trees and rankers equal."""
    import numpy as np

    for path in sorted((workdir / a).rglob("*.npz")):
        with np.load(path) as x, np.load(workdir / b / path.relative_to(workdir / a)) as y:
            if x.files != y.files or any(not np.array_equal(x[k], y[k]) for k in x.files):
                return False
    return True


def precision(workdir: Path, name: str) -> dict:
    import scipy.sparse as sp
    from xtag.models.metrics import evaluate
    from xtag.models.xlinear.model import XLinearModel

    X, Y = sp.load_npz(workdir / "X_test.npz").tocsr(), sp.load_npz(workdir / "Y_test.npz").tocsr()
    labels = XLinearModel.load(workdir / name).predict(X, k=5).labels
    metrics = evaluate(labels, Y, ks=(1, 5))
    return {k: round(float(metrics[k]), 2) for k in ("P@1", "P@5")}


def ray_side(args: argparse.Namespace, runs: dict) -> None:
    """The Ray run and the killed one, on one local cluster of two one-CPU nodes."""
    from tests.ray_support import local_cluster

    with local_cluster(workers=1, cpus=1) as cluster:
        runs["ray"] = run_trainer(args, "ray", "ray", cluster.address)
        if args.kill_after is not None:
            stop, killed = threading.Event(), []
            killer = threading.Thread(
                target=lambda: killed.append(cluster.kill_running("_subtree_task", stop, args.kill_after))
            )
            killer.start()
            try:
                runs["killed"] = run_trainer(args, "ray", "killed", cluster.address)
            finally:
                stop.set()
                killer.join()
            runs["killed"]["killed_pid"] = killed[0]


def subtree_figures(events: list[dict]) -> dict:
    """Per sub-tree: labels, seconds, worker peak; and each worker's peak (what the plan scales)."""
    subs = [e for e in events if e["event"] == "subtree"]
    workers: dict = {}
    for e in subs:
        workers[e["worker_pid"]] = max(workers.get(e["worker_pid"], 0), e["worker_peak_rss_mb"])
    top = next(e for e in events if e["event"] == "tree")
    return {
        "subtrees": len(subs),
        "labels_per_subtree": [e["labels"] for e in subs],
        "subtree_seconds": [e["seconds"] for e in subs],
        "top": {k: top[k] for k in ("split_level", "nodes", "seconds", "worker_peak_rss_mb")},
        "worker_peak_rss_mb": sorted(workers.values()),
    }


def main() -> None:
    args = parse_args()
    if args.role:
        return trainer(args)
    args.workdir.mkdir(parents=True, exist_ok=True)
    from bench.helpers.pecos import featurize

    if not (args.workdir / "X_train.npz").exists():
        featurize(args)
    runs = {"local": run_trainer(args, "local", "local")}
    ray_side(args, runs)
    result = {"data": str(args.data), "ngram_max": args.ngram_max, "runs": {}}
    for name, facts in runs.items():
        entry = {k: v for k, v in facts.items() if k != "events"}
        entry["identical_to_local"] = name == "local" or compare(args.workdir, "local", name)
        entry |= precision(args.workdir, name) if name == "local" or not entry["identical_to_local"] else {}
        if name != "local":
            entry |= subtree_figures(facts["events"])
        result["runs"][name] = entry
    import scipy.sparse as sp

    X, Y = sp.load_npz(args.workdir / "X_train.npz"), sp.load_npz(args.workdir / "Y_train.npz")
    result["object_store_mb"] = round(sum(a.nbytes for M in (X, Y) for a in (M.data, M.indices, M.indptr)) / 2**20, 1)
    result["rankers_mb"] = round(
        sum(f.stat().st_size for f in (args.workdir / "local" / "rankers").glob("*.npz")) / 2**20, 1
    )
    result["shape"] = {"documents": X.shape[0], "features": X.shape[1], "labels": Y.shape[1], "nnz": int(X.nnz)}
    save_result(args.result_name, result)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
