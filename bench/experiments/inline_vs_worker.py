"""Inlined lone requests (XTAG_INLINE_MAX_TEXTS=1, the default) vs always handing predictions to the worker
thread (=0).

1. A sequential client's /v1/predict p50 for both, on one server (xtag serve's app and uvicorn settings in
   a thread of this process) whose batcher is switched between blocks of requests: between server
   processes p50 moves by more than is at stake here (memory placement), so the two are compared on one.
2. Closed-loop throughput and batch sizes at a few client counts, each configuration in its own
   `xtag serve` subprocess, configurations alternating: batching under load must not change.

    .venv/bin/python -m bench.experiments.inline_vs_worker --bundle bench/out/xr_transformer/xlinear-bundle
"""

from __future__ import annotations

import argparse
import asyncio
import json
import urllib.request
from pathlib import Path

import numpy as np
from xtag.corpus.files import load_corpus

from bench.helpers.results import save_result
from bench.helpers.server import ROOT, _clients, free_port, start_server
from bench.helpers.transformer import HttpPredict, ThreadServer, alternating


def batch_sizes(port: int) -> dict[str, int]:
    """Predictor calls per batch-size bucket, from the server's Prometheus histogram."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    rows = [line for line in text.splitlines() if line.startswith("xtag_predict_batch_documents_bucket")]
    counts = [float(line.split()[-1]) for line in rows]
    bounds = [line.split('le="')[1].split('"')[0] for line in rows]
    return {f"<={b}": int(c - p) for b, c, p in zip(bounds, counts, [0.0] + counts[:-1]) if c > p}


def lone_latency(bundle: Path, texts: list[str], repeats: int) -> list[dict]:
    """p50 ms of in-process predict, and of /v1/predict inlined and via the worker, on one server."""
    served = ThreadServer(bundle)
    http = HttpPredict(served.port)

    def via_worker(i: int) -> None:
        with served.inlining_off():
            http(texts[i])

    calls = {
        "predict": lambda i: served.predictor.predict([texts[i]], k=5),
        "http_inline": lambda i: http(texts[i]),
        "http_worker": via_worker,
    }
    out = []
    try:
        for _ in range(repeats):
            times = alternating(calls, len(texts), rounds=3, block=20)
            p50 = {name: round(float(np.median(t)) * 1e3, 3) for name, t in times.items()}
            out.append({**p50, "inline_minus_worker_ms": round(p50["http_inline"] - p50["http_worker"], 3)})
            print(f"lone client: {out[-1]}", flush=True)
    finally:
        http.close()
        served.close()
    return out


def run(bundle: Path, inline: str, bodies: list[bytes], clients: int) -> dict:
    port = free_port()
    server = start_server(bundle, port, "on", XTAG_INLINE_MAX_TEXTS=inline)
    try:
        seconds, wall = asyncio.run(_clients(port, bodies, clients, "/v1/predict"))
        return {
            "p50_ms": round(float(np.median(seconds)) * 1e3, 2),
            "req_per_s": round(len(bodies) / wall, 1),
            "batch_sizes": batch_sizes(port),
        }
    finally:
        server.terminate()
        server.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, required=True)
    ap.add_argument("--test", type=Path, default=ROOT.parent / "shared" / "data" / "debtags" / "test.jsonl.gz")
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--clients", default="6,8")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--result-name", default=None, help="bench/results/<name>.json (default: inline_vs_worker_<bundle folder name>)"
    )
    args = ap.parse_args()
    texts = load_corpus(args.test).texts[: args.requests]
    bodies = [json.dumps({"text": t, "k": 5}).encode() for t in texts]
    results: dict = {"lone_client": lone_latency(args.bundle, texts[:200], args.repeats)}
    for clients in map(int, args.clients.split(",")):
        for _ in range(args.repeats):
            for inline in ("1", "0") if _ % 2 else ("0", "1"):
                r = run(args.bundle, inline, bodies, clients)
                results.setdefault(f"clients={clients} inline_max_texts={inline}", []).append(r)
                print(f"clients={clients} inline_max_texts={inline}: {r}", flush=True)
    print(
        json.dumps(
            {
                k: v
                if k == "lone_client"
                else {"p50_ms": [r["p50_ms"] for r in v], "req_per_s": [r["req_per_s"] for r in v]}
                for k, v in results.items()
            }
        )
    )
    save_result(
        args.result_name or f"inline_vs_worker_{args.bundle.resolve().name}",
        {"bundle": str(args.bundle), "requests": len(bodies), **results},
    )


if __name__ == "__main__":
    main()
