"""XR-Linear: xtag vs PECOS on the same TF-IDF matrices, same machine, same run.

    .venv/bin/python -m bench.xlinear_vs_pecos --data ../shared/data/debtags --threads 2
    .venv/bin/python -m bench.xlinear_vs_pecos --data DIR --threads 2 --repeats 1   # e.g. bench/synthetic_xmc.py's

Installs libpecos into its own venv (bench/peers/setup_pecos.sh; never an xtag dependency), trains
both on identical features, and reports accuracy (our metrics code for both), training time,
single-document latency (vectorisation excluded) and batch throughput, with ratios.

Each library trains in a process of its own (bench/peers/xtag_xlinear.py, bench/peers/pecos_xlinear.py),
xtag then PECOS, `--repeats` times; both read the same X_train/Y_train .npz files, time their training
alone and report their process's peak RSS right after training (VmHWM: imports, input matrices and
training; the figure before training is kept too. Not ru_maxrss: a child started from this process
would report at least this process's RSS, see bench/peers/xtag_xlinear.py). The last xtag training is
written as a run (xtag.training.run.save_model), exported (xtag.training.export.export_run.export_run), and the bundle loaded
by xtag.models.bundle.loader.load_bundle in fresh processes (median of --bundle-loads; the files are in the page
cache, just written). Prediction timings come from that run's model in this process, after a warm-up,
as PECOS's come from its predict-only model after one.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from xtag.corpus.files import load_corpus
from xtag.evaluation.evaluate import ground_truth
from xtag.models.features.tfidf import TfidfConfig
from xtag.models.metrics import evaluate
from xtag.models.xlinear.model import XLinearModel
from xtag.training.export.export_run import export_run

from bench.helpers.pecos import METRICS, PECOS_PY, PEERS, ROOT, featurize
from bench.helpers.results import save_result


def single_latency(model, X, n: int) -> tuple[float, float]:
    for i in range(20):
        model.predict(X[i], k=10)
    times = []
    for i in range(min(n, X.shape[0])):
        x = X[i]
        start = time.perf_counter()
        model.predict(x, k=10)
        times.append(time.perf_counter() - start)
    return float(np.percentile(times, 50) * 1e3), float(np.percentile(times, 99) * 1e3)


def bundle_load(bundle: Path) -> dict:
    """load_bundle in a fresh interpreter: its own seconds, with the import, the whole process's, its RSS."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "bench.peers.xtag_xlinear", "load-bundle", str(bundle)],
        check=True,
        capture_output=True,
        text=True,
    )
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "process_s": time.perf_counter() - start}


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "debtags")
    ap.add_argument("--workdir", type=Path, default=ROOT / "bench" / "out" / "xlinear_vs_pecos")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="trainings per library; the median time counts")
    ap.add_argument("--bundle-loads", type=int, default=3, help="fresh processes loading xtag's bundle; median")
    ap.add_argument(
        "--ngram-max", type=int, default=TfidfConfig().ngram_max, help="TF-IDF word n-grams (xtag's default)"
    )
    ap.add_argument("--min-df", type=int, default=TfidfConfig().min_df, help="TF-IDF minimum document frequency")
    ap.add_argument(
        "--result-name", default=None, help="bench/results/<name>.json (default: xlinear_vs_pecos_<data folder name>)"
    )
    return ap.parse_args()


def train_interleaved(args: argparse.Namespace, run: Path) -> tuple[list[dict], list[dict]]:
    """--repeats trainings of each library in its own process, interleaved so both see the same machine load;
    the last xtag round also saves its run. Each round's result file, per library."""
    ours_rounds, peer_rounds = [], []
    for r in range(args.repeats):
        last = r == args.repeats - 1
        subprocess.run(
            [sys.executable, "-m", "bench.peers.xtag_xlinear", "train", "--workdir", str(args.workdir)]
            + ["--threads", str(args.threads)]
            + (["--save-run", str(run), "--corpus", str(args.data / "train.jsonl.gz")] if last else []),
            check=True,
        )
        ours_rounds.append(json.loads((args.workdir / "xtag_result.json").read_text()))
        subprocess.run(
            [
                str(PECOS_PY),
                "-m",
                "bench.peers.pecos_xlinear",
                "--workdir",
                str(args.workdir),
                "--threads",
                str(args.threads),
                "--repeats",
                "1",
            ],
            check=True,
        )
        peer_rounds.append(json.loads((args.workdir / "pecos_result.json").read_text()))
    return ours_rounds, peer_rounds


def peer_summary(peer_rounds: list[dict]) -> dict:
    """PECOS's last round, with the median training time and the largest memory figures over the rounds."""
    peer = peer_rounds[-1]
    peer["train_s"] = float(np.median([p["train_s"] for p in peer_rounds]))
    peer["train_peak_rss_mb"] = max(p["train_peak_rss_mb"] for p in peer_rounds)
    peer["rss_before_train_mb"] = max(p["rss_before_train_mb"] for p in peer_rounds)
    return peer


def serve_side(args: argparse.Namespace, run: Path, Xt, ours_rounds: list[dict]):
    """xtag's figures beside its training rounds': export and bundle loads, then batch and single-document
    predictions in this process. The figures, the batch's top 10 and each bundle load's."""
    bundle = args.workdir / "xtag_bundle"
    start = time.perf_counter()
    export_run(run, bundle, name=f"xlinear-{args.data.resolve().name}", overwrite=True)
    export_s = time.perf_counter() - start
    loads = [bundle_load(bundle) for _ in range(args.bundle_loads)]
    bundle_mb = sum(f.stat().st_size for f in bundle.rglob("*") if f.is_file()) / 2**20

    model = XLinearModel.load(run / "model")
    model.prepare()  # the engine layout and its kernels, as load_bundle does; PECOS's model is loaded too
    model.predict(Xt[: min(64, Xt.shape[0])], k=10)  # warm-up, as pecos_xlinear.py's
    start = time.perf_counter()
    ours_pred = model.predict(Xt, k=10).labels
    ours_batch = time.perf_counter() - start
    p50, p99 = single_latency(model, Xt, 1000)
    ours = {
        "train_s": float(np.median([o["train_s"] for o in ours_rounds])),
        "docs_per_s": Xt.shape[0] / ours_batch,
        "single_p50_ms": p50,
        "single_p99_ms": p99,
        "train_peak_rss_mb": max(o["train_peak_rss_mb"] for o in ours_rounds),
        "rss_before_train_mb": max(o["rss_before_train_mb"] for o in ours_rounds),
        "bundle_load_s": float(np.median([x["load_s"] for x in loads])),
        "bundle_load_process_s": float(np.median([x["process_s"] for x in loads])),
        "bundle_peak_rss_mb": float(np.median([x["peak_rss_mb"] for x in loads])),
        "bundle_mb": bundle_mb,
        "export_s": export_s,
    }
    return ours, ours_pred, loads


def print_comparison(acc: dict, ours: dict, peer: dict, loads: list[dict]) -> None:
    print(f"\n{'metric':<12}{'xtag':>10}{'PECOS':>10}")
    for m in METRICS:
        print(f"{m:<12}{acc['xtag'][m]:10.2f}{acc['pecos'][m]:10.2f}")
    rows = [
        ("train s (tree+rankers)", ours["train_s"], peer["train_s"]),
        ("single p50 ms", ours["single_p50_ms"], peer["single_p50_ms"]),
        ("single p99 ms", ours["single_p99_ms"], peer["single_p99_ms"]),
        ("batch docs/s", ours["docs_per_s"], peer["docs_per_s"]),
        ("training peak RSS MB", ours["train_peak_rss_mb"], peer["train_peak_rss_mb"]),
        ("RSS before training MB", ours["rss_before_train_mb"], peer["rss_before_train_mb"]),
    ]
    print(f"\n{'':<24}{'xtag':>10}{'PECOS':>10}{'ratio':>8}")
    for name, a, b in rows:
        print(f"{name:<24}{a:10.2f}{b:10.2f}{a / b:8.2f}")
    print(
        f"xtag bundle: {ours['bundle_mb']:.0f} MB, load_bundle {ours['bundle_load_s']:.2f} s in a fresh process "
        f"({ours['bundle_load_process_s']:.2f} s with interpreter start and imports; median of {len(loads)}), "
        f"RSS {ours['bundle_peak_rss_mb']:.0f} MB"
    )


def main() -> None:
    args = parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    subprocess.run(["bash", str(PEERS / "setup_pecos.sh")], check=True)
    vocab, Xt, shape = featurize(args)

    run = args.workdir / "xtag_run"
    ours_rounds, peer_rounds = train_interleaved(args, run)
    times, peer_times = [o["train_s"] for o in ours_rounds], [p["train_s"] for p in peer_rounds]
    peer = peer_summary(peer_rounds)
    ours, ours_pred, loads = serve_side(args, run, Xt, ours_rounds)
    print("training seconds per round (xtag, PECOS):", [(round(a, 2), round(b, 2)) for a, b in zip(times, peer_times)])
    with np.load(args.workdir / "pecos_pred.npz") as z:
        pecos_pred = z["indices"].astype(np.int64)

    # The XMC convention (models/metrics.py): test labels unseen in training stay in as misses for both.
    truth = ground_truth(load_corpus(args.data / "test.jsonl.gz"), vocab)
    acc = {
        "xtag": evaluate(ours_pred, truth.Y, (1, 3, 5), truth.propensity, truth.convention),
        "pecos": evaluate(pecos_pred, truth.Y, (1, 3, 5), truth.propensity, truth.convention),
    }
    print_comparison(acc, ours, peer, loads)
    keys = ("train_s", "single_p50_ms", "single_p99_ms", "docs_per_s", "train_peak_rss_mb", "rss_before_train_mb")
    result = {
        "xtag": {**ours, **{m: acc["xtag"][m] for m in METRICS}},
        "pecos": {
            **{k: peer[k] for k in (*keys, "pecos_version")},
            **{m: acc["pecos"][m] for m in METRICS},
        },
        "threads": args.threads,
        "repeats": args.repeats,
        "convention": truth.convention,
        "unseen_test_label_mentions": truth.unseen_mentions,
        **shape,
        "train_s_rounds": {"xtag": times, "pecos": peer_times},
        "train_peak_rss_mb_rounds": {
            "xtag": [o["train_peak_rss_mb"] for o in ours_rounds],
            "pecos": [p["train_peak_rss_mb"] for p in peer_rounds],
        },
        "bundle_loads": loads,
        "ratios": {k: ours[k] / peer[k] for k in keys},
    }
    meta = args.data / "meta.json"  # bench/synthetic_xmc.py's description of a generated corpus
    if meta.exists():
        result["corpus"] = json.loads(meta.read_text())
    (args.workdir / "result.json").write_text(json.dumps(result, indent=2))
    print(f"\nwritten {args.workdir / 'result.json'}", file=sys.stderr)
    save_result(args.result_name or f"xlinear_vs_pecos_{args.data.resolve().name}", result)


if __name__ == "__main__":
    main()
