"""What the service's guards cost: /v1/predict p50 and /v1/predict/batch docs/s, this code against an older one.

Two servers on loopback take turns, round by round (the order alternates, so that neither always runs right after
the other): --before-code's (a folder holding an `xtag` package: an older commit's tree with models/, training/,
evaluation/ and service/ linked under xtag/, as bench/service_load.py's --server-code) and this checkout's. Each
round starts the server, warms it up, then times `--requests` single-text /v1/predict calls over one keep-alive
connection (sequential client: the latency a user sees) and `--batches` /v1/predict/batch calls of `--batch` texts
each (one client: docs/s), and stops it. Default settings on both, so the guards the newer code adds (cost-based
admission, disconnect watching, ...) are on. The figures to compare are the medians over rounds of one run, with
the load average recorded: on a shared machine a lone number says little.

    .venv/bin/python -m bench.guard_cost --bundle bundles/debtags-xl --test data/debtags/test.jsonl.gz \\
        --before-code /tmp/before38/pkg --result-name guard_cost_debtags
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

import numpy as np
import orjson
from xtag.corpus.files import load_corpus

from bench.helpers.results import save_result
from bench.helpers.server import free_port, start_server, timed


def one_round(code: Path | None, bundle: Path, singles: list[bytes], batches: list[bytes], batch: int) -> dict:
    port = free_port()
    proc = start_server(bundle, port, "true", code_dir=code, XTAG_MAX_BATCH_DOCUMENTS=str(batch))
    try:
        asyncio.run(timed(port, "/v1/predict", singles[:200]))  # warm-up
        single = asyncio.run(timed(port, "/v1/predict", singles))
        batched = asyncio.run(timed(port, "/v1/predict/batch", batches))
    finally:
        proc.terminate()
        proc.wait(30)
    return {
        "p50_ms": float(np.percentile(single, 50) * 1e3),
        "p99_ms": float(np.percentile(single, 99) * 1e3),
        "batch_docs_per_s": float(len(batches) * batch / batched.sum()),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", type=Path, required=True)
    ap.add_argument("--test", type=Path, required=True, help="texts to send (a corpus: JSONL, TSV, ...)")
    ap.add_argument("--before-code", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--result-name", default="guard_cost")
    args = ap.parse_args()

    texts = load_corpus(args.test).texts
    singles = [orjson.dumps({"text": texts[i % len(texts)], "k": args.k}) for i in range(args.requests)]
    batches = [
        orjson.dumps(
            {"documents": [{"text": texts[(b * args.batch + j) % len(texts)]} for j in range(args.batch)], "k": args.k}
        )
        for b in range(args.batches)
    ]
    codes = {"before": args.before_code.resolve(), "after": None}
    rounds: dict[str, list[dict]] = {name: [] for name in codes}
    for r in range(args.rounds):
        order = list(codes) if r % 2 == 0 else list(codes)[::-1]
        for name in order:
            rounds[name].append(one_round(codes[name], args.bundle, singles, batches, args.batch))
            print(f"round {r + 1} {name}: {rounds[name][-1]} (load {os.getloadavg()[0]:.2f})", file=sys.stderr)
    median = {name: {key: float(np.median([x[key] for x in runs])) for key in runs[0]} for name, runs in rounds.items()}
    payload = {
        "bundle": str(args.bundle),
        "k": args.k,
        "requests_per_round": args.requests,
        "batch": args.batch,
        "batches_per_round": args.batches,
        "rounds": args.rounds,
        "per_round": rounds,
        "median": median,
        "after_over_before": {key: median["after"][key] / median["before"][key] for key in median["after"]},
    }
    print(orjson.dumps(payload["median"], option=orjson.OPT_INDENT_2).decode())
    print("after / before:", payload["after_over_before"])
    save_result(args.result_name, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
