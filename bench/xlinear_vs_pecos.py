"""XR-Linear: xtag vs PECOS on the same TF-IDF matrices, same machine, same run.

    .venv/bin/python bench/xlinear_vs_pecos.py --data ../shared/data/debtags --threads 2

Installs libpecos into its own venv (bench/peers/setup_pecos.sh; never an xtag dependency), trains
both on identical features, and reports accuracy (our metrics code for both), training time,
single-document latency (vectorisation excluded) and batch throughput, with ratios.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from results import save_result  # bench/ is on sys.path when run as a script

from models.features import TfidfFeaturizer
from models.metrics import evaluate, jain_propensities
from training.data import build_vocab, load_corpus
from training.xlinear.config import XLinearConfig
from training.xlinear.train import train_xlinear

ROOT = Path(__file__).resolve().parent.parent
PECOS_PY = ROOT / "bench" / ".venv-pecos" / "bin" / "python"
METRICS = ("P@1", "P@3", "P@5", "PSP@1", "PSP@3", "PSP@5", "nDCG@5", "macro-R@5")


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "debtags")
    ap.add_argument("--workdir", type=Path, default=ROOT / "bench" / "out" / "xlinear_vs_pecos")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="trainings per library; the median time counts")
    ap.add_argument(
        "--result-name", default=None, help="bench/results/<name>.json (default: xlinear_vs_pecos_<data folder name>)"
    )
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    subprocess.run(["bash", str(ROOT / "bench" / "peers" / "setup_pecos.sh")], check=True)

    train, test = load_corpus(args.data / "train.jsonl.gz"), load_corpus(args.data / "test.jsonl.gz")
    vocab = build_vocab(train)
    featurizer, X = TfidfFeaturizer.fit(train.texts)
    Xt = featurizer.transform(test.texts)
    Y, Yt = train.label_matrix(vocab)[0], test.label_matrix(vocab)[0]
    for name, M in {"X_train": X, "Y_train": Y, "X_test": Xt, "Y_test": Yt}.items():
        sp.save_npz(args.workdir / f"{name}.npz", M.tocsr().astype(np.float32))

    # Interleave the two libraries' trainings so both see the same machine load.
    config = XLinearConfig(n_jobs=args.threads)
    times, peer_times = [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        model = train_xlinear(X, Y, config, progress=False)
        times.append(time.perf_counter() - start)
        subprocess.run(
            [
                str(PECOS_PY),
                str(ROOT / "bench" / "peers" / "pecos_xlinear.py"),
                "--workdir",
                str(args.workdir),
                "--threads",
                str(args.threads),
                "--repeats",
                "1",
            ],
            check=True,
        )
        peer = json.loads((args.workdir / "pecos_result.json").read_text())
        peer_times.append(peer["train_s"])
    peer["train_s"] = float(np.median(peer_times))
    start = time.perf_counter()
    ours_pred = model.predict(Xt, k=10).labels
    ours_batch = time.perf_counter() - start
    p50, p99 = single_latency(model, Xt, 1000)
    ours = {
        "train_s": float(np.median(times)),
        "docs_per_s": Xt.shape[0] / ours_batch,
        "single_p50_ms": p50,
        "single_p99_ms": p99,
    }
    print("training seconds per round (xtag, PECOS):", [(round(a, 2), round(b, 2)) for a, b in zip(times, peer_times)])
    with np.load(args.workdir / "pecos_pred.npz") as z:
        pecos_pred = z["indices"].astype(np.int64)

    prop = jain_propensities(vocab.frequency_array, vocab.n_train_docs)
    acc = {"xtag": evaluate(ours_pred, Yt, (1, 3, 5), prop), "pecos": evaluate(pecos_pred, Yt, (1, 3, 5), prop)}
    print(f"\n{'metric':<12}{'xtag':>10}{'PECOS':>10}")
    for m in METRICS:
        print(f"{m:<12}{acc['xtag'][m]:10.2f}{acc['pecos'][m]:10.2f}")
    rows = [
        ("train s (tree+rankers)", ours["train_s"], peer["train_s"]),
        ("single p50 ms", ours["single_p50_ms"], peer["single_p50_ms"]),
        ("single p99 ms", ours["single_p99_ms"], peer["single_p99_ms"]),
        ("batch docs/s", ours["docs_per_s"], peer["docs_per_s"]),
    ]
    print(f"\n{'':<24}{'xtag':>10}{'PECOS':>10}{'ratio':>8}")
    for name, a, b in rows:
        print(f"{name:<24}{a:10.2f}{b:10.2f}{a / b:8.2f}")
    result = {
        "xtag": {**ours, **{m: acc["xtag"][m] for m in METRICS}},
        "pecos": {
            **{k: peer[k] for k in ("train_s", "docs_per_s", "single_p50_ms", "single_p99_ms", "pecos_version")},
            **{m: acc["pecos"][m] for m in METRICS},
        },
        "threads": args.threads,
        "repeats": args.repeats,
        "documents": [X.shape[0], Xt.shape[0]],
        "features": X.shape[1],
        "labels": Y.shape[1],
        "train_s_rounds": {"xtag": times, "pecos": peer_times},
        "ratios": {k: ours[k] / peer[k] for k in ("train_s", "single_p50_ms", "single_p99_ms", "docs_per_s")},
    }
    (args.workdir / "result.json").write_text(json.dumps(result, indent=2))
    print(f"\nwritten {args.workdir / 'result.json'}", file=sys.stderr)
    save_result(args.result_name or f"xlinear_vs_pecos_{args.data.resolve().name}", result)


if __name__ == "__main__":
    main()
