"""Single-text `/v1/predict` under concurrent load: the default predictor calls at once against XTAG_INFERENCE_THREADS=1.

    .venv/bin/python -m bench.experiments.inference_threads --bundle bench/out/xlinear_vs_pecos_debdeps/xtag_bundle \\
        --test ../shared/data/debdeps/test.jsonl.gz --result-name inference_threads_debdeps

XR-Linear bundles run two predictor calls at once by default (models/families.py parallel_calls), which
lifts batch throughput (service_latency.py --pecos). This checks what the default does to the other load,
many clients of one text each, where micro-batches are small: both servers run side by side and take turns
round by round (alternating which goes first), `--clients` connections sending the same texts to each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path

import numpy as np
from xtag.corpus.files import load_corpus

from bench.helpers.results import save_result
from bench.helpers.server import _clients, free_port, start_server

CONFIGS = {"default": {}, "XTAG_INFERENCE_THREADS=1": {"XTAG_INFERENCE_THREADS": "1"}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, required=True)
    ap.add_argument("--test", type=Path, required=True)
    ap.add_argument("--requests", type=int, default=2000, help="single-text requests per server per round")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--result-name", default="inference_threads")
    args = ap.parse_args()

    texts = load_corpus(args.test).texts[: args.requests]
    bodies = [json.dumps({"text": t, "k": args.k}).encode() for t in texts]
    servers = {}
    try:
        for name, env in CONFIGS.items():
            port = free_port()
            servers[name] = (port, start_server(args.bundle, port, "on", None, 1, **env))
        for port, _ in servers.values():  # warm-up
            asyncio.run(_clients(port, bodies[:200], args.clients, "/v1/predict"))
        rounds = []
        for r in range(args.rounds):
            row: dict = {"load_average": os.getloadavg()[0]}
            for name in list(servers)[:: 1 if r % 2 == 0 else -1]:
                port, _ = servers[name]
                seconds, wall = asyncio.run(_clients(port, bodies, args.clients, "/v1/predict"))
                row[name] = {
                    "requests_per_s": len(bodies) / wall,
                    "p50_ms": float(np.percentile(seconds, 50) * 1e3),
                    "p99_ms": float(np.percentile(seconds, 99) * 1e3),
                }
            rounds.append(row)
            print(f"round {r + 1}: " + ", ".join(f"{n} {row[n]['requests_per_s']:,.0f} req/s" for n in servers))
    finally:
        for _, proc in servers.values():
            proc.terminate()
            proc.wait(10)
    a, b = CONFIGS
    median = {
        name: {key: float(np.median([row[name][key] for row in rounds])) for key in rounds[0][name]} for name in servers
    }
    ratio = float(np.median([row[a]["requests_per_s"] / row[b]["requests_per_s"] for row in rounds]))
    out = {
        "bundle": str(args.bundle),
        "test": str(args.test),
        "requests": len(bodies),
        "clients": args.clients,
        "k": args.k,
        "rounds": rounds,
        "median": median,
        "median_ratio_requests_per_s": ratio,
    }
    for name, m in median.items():
        print(f"{name:<28} {m['requests_per_s']:>8,.0f} req/s  p50 {m['p50_ms']:.1f} ms  p99 {m['p99_ms']:.1f} ms")
    print(f"req/s {a} / {b}, median of rounds: {ratio:.3f}")
    save_result(args.result_name, out)


if __name__ == "__main__":
    main()
