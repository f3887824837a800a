"""The families side by side at one CPU budget on the whole of debtags (issue 29's equal-budget table).

Each row is a finished run and its exported bundle, trained beforehand at the same budget for the transformer
families: one epoch of the 23.5K training texts at 64 tokens in batches of 16 (LightXML and CascadeXML 1,400-1,470
optimiser steps; XR-Transformer 735 steps at each of its two fine-tuning resolutions, 1,470 in all), XR-Linear
beside them (no encoder). The commands that trained them are listed in bench/RESULTS.md. Here every bundle goes
through the same measurements, one after the other in one process:

- quality: `evaluate_bundle` on the 5,910-document test split (the served bundle, XMC convention);
- speed: `POST /v1/predict` p50 over HTTP (k=5), each bundle served by `xtag serve`'s server in a subprocess,
  the bundles taking turns text by text so that they share the machine's load;
- training time: the run's wall time from its first to its last log event (train_log.jsonl), which includes
  building the tree, encoding and the rankers, not only the optimiser steps.

    .venv/bin/python -m bench.equal_budget_debtags \
        --row "XR-Linear|bench/out/xlinear_epoch/run|bench/out/xlinear_epoch/bundle|no encoder" ...
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from xtag.corpus.files import load_corpus
from xtag.evaluation.evaluate import evaluate_bundle
from xtag.models.bundle.loader import load_bundle

from bench.helpers.results import ROOT, save_result
from bench.helpers.server import free_port, start_server
from bench.helpers.transformer import HttpPredict

METRICS = ("P@1", "P@3", "P@5", "PSP@5", "macro-R@5")


def run_seconds(run: Path) -> float:
    """Wall seconds from a run's first to its last logged event."""
    times = [json.loads(line)["time"] for line in (run / "train_log.jsonl").read_text().splitlines() if line.strip()]
    return times[-1] - times[0]


def http_p50(bundles: dict[str, Path], texts: list[str], warmup: int = 20) -> dict[str, float]:
    """p50 ms of POST /v1/predict per bundle, one server each, the bundles taking turns text by text."""
    servers, clients = {}, {}
    try:
        for name, bundle in bundles.items():
            port = free_port()
            servers[name] = start_server(bundle, port, "on")
            clients[name] = HttpPredict(port, k=5)
        for text in texts[:warmup]:
            for call in clients.values():
                call(text)
        times: dict[str, list[float]] = {name: [] for name in bundles}
        for text in texts[warmup:]:
            for name, call in clients.items():
                start = time.perf_counter()
                call(text)
                times[name].append(time.perf_counter() - start)
    finally:
        for proc in servers.values():
            proc.terminate()
            proc.wait(10)
    return {name: float(np.median(t) * 1e3) for name, t in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "debtags")
    ap.add_argument(
        "--row", action="append", required=True, help="'label|run dir|bundle dir|budget' (repeat, table order)"
    )
    ap.add_argument("--latency-texts", type=int, default=300)
    ap.add_argument("--result-name", default="equal_budget_debtags")
    args = ap.parse_args()
    test = load_corpus(args.data / "test.jsonl.gz")
    rows = {}
    for spec in args.row:
        label, run, bundle, budget = spec.split("|")
        start = time.perf_counter()
        metrics, info = evaluate_bundle(load_bundle(Path(bundle)), test, progress=False)
        rows[label] = {
            "run": run,
            "bundle": bundle,
            "budget": budget,
            "train_seconds": round(run_seconds(Path(run)), 1),
            "metrics": {m: round(metrics[m], 2) for m in METRICS},
            "convention": info["convention"],
            "eval_seconds": round(time.perf_counter() - start, 1),
        }
        print(json.dumps({label: rows[label]["metrics"]}), flush=True)
    p50 = http_p50({label: Path(r["bundle"]) for label, r in rows.items()}, test.texts[: args.latency_texts])
    for label, ms in p50.items():
        rows[label]["http_p50_ms"] = round(ms, 3)
    result = {"rows": rows, "test_documents": len(test), "latency_texts": args.latency_texts - 20}
    print(json.dumps(result, indent=2))
    save_result(args.result_name, result, benchmark="equal_budget")


if __name__ == "__main__":
    main()
