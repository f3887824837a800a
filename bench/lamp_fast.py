"""LaMP fast: one change at a time on debtags, each row's quality beside its speed, all rows from one run.

    .venv/bin/python -m bench.lamp_fast --first bundles/debtags-xl --lamp bundles/debtags-lamp \\
        --lamp-int8 bundles/debtags-lamp-int8 --old-code /tmp/old-pkg --result-name lamp_fast_debtags

Rows: the first stage alone; the LaMP bundle served by the code before this change (--old-code: a folder
holding an `xtag` package of an older commit, as service_load.py's --server-code); the same bundle with this
code (batched tokenization: one Rust call per request, no Python loop per text); its int8 re-ranker. Quality
(P@1, PSP@5, macro-F1@5 by the evaluation code, XMC convention) is computed in this process on the TEST
split; the old code's graph is the same file and its token ids are the same (tests/models/lamp/test_model.py),
so its quality is the fp32 row's. Speed: the added in-process p50 (one text, LaMP against `"rerank": false`,
alternating), and over HTTP (one server per row, each in its own process, all started before the first
measure): `/v1/predict` p50 (one client, one text, k=5) and `/v1/predict/batch` docs/s at --batch documents
per request, in --rounds rounds that visit the rows in turn, so that the shared machine's load drifts over all
rows alike (medians of the rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import numpy as np
from xtag.corpus.files import load_corpus
from xtag.evaluation.evaluate import ground_truth
from xtag.models.bundle.loader import load_bundle
from xtag.models.metrics import evaluate
from xtag.models.tagging.batches import predict_corpus

from bench.helpers.results import save_result
from bench.helpers.server import _clients, free_port, ms, start_server
from bench.helpers.transformer import subset

ROOT = Path(__file__).resolve().parents[1]

METRICS = ("P@1", "P@3", "P@5", "PSP@5", "macro-F1@5")
GOALS = {"http_p50_ms": 2.0, "batch_docs_per_s": 4000.0, "P@1": 90.0, "PSP@5": 71.0}


def quality(bundle, test) -> dict:
    preds = predict_corpus(bundle, test.texts, 10, progress=False)
    truth = ground_truth(test, bundle.predictor.vocab)
    ranked = evaluate(preds.labels, truth.Y, (1, 3, 5), truth.propensity)
    return {m: round(float(ranked[m]), 2) for m in METRICS}


def added_p50(bundle, texts: list[str], rounds: int) -> dict:
    """In-process p50 of one text with LaMP and with `rerank=False`, alternating text by text."""
    model = bundle.predictor
    with_lamp, alone = [], []
    for _ in range(rounds):
        for text in texts:
            for out, rerank in ((with_lamp, True), (alone, False)):
                start = time.perf_counter()
                model.predict([text], k=5, rerank=rerank)
                out.append(time.perf_counter() - start)
    lamp_ms, first_ms = ms(np.array(with_lamp), 50), ms(np.array(alone), 50)
    return {"lamp_p50_ms": lamp_ms, "first_stage_p50_ms": first_ms, "added_p50_ms": lamp_ms - first_ms}


def http_round(port: int, singles: list[bytes], batches: list[bytes], batch: int) -> tuple[float, float]:
    """(p50 ms of one-text requests, docs/s of the batch requests) of one server, one client."""
    times, _ = asyncio.run(_clients(port, singles, 1, "/v1/predict"))
    _, wall = asyncio.run(_clients(port, batches, 1, "/v1/predict/batch"))
    return ms(times, 50), len(batches) * batch / wall


def http_rows(rows: dict[str, tuple[Path, Path | None]], texts: list[str], args: argparse.Namespace) -> dict:
    """Each row's server (bundle, code folder or None for this checkout): p50 and batch docs/s, rounds in turn."""
    singles = [json.dumps({"text": t, "k": 5}).encode() for t in texts[: args.latency_texts]]
    chunks = [texts[i : i + args.batch] for i in range(0, args.batch_docs, args.batch)]
    batches = [
        json.dumps({"documents": [{"id": str(i), "text": t} for i, t in enumerate(c)], "k": 5}).encode()
        for c in chunks
        if len(c) == args.batch
    ]
    servers = {}
    try:
        for name, (bundle, code) in rows.items():
            port = free_port()
            servers[name] = (port, start_server(bundle, port, "on", code_dir=code))
        for port, _ in servers.values():  # warm-up: sessions and first allocations
            http_round(port, singles[:20], batches[:1], args.batch)
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in rows}
        for _ in range(args.rounds):
            for name, (port, _) in servers.items():
                runs[name].append(http_round(port, singles, batches, args.batch))
        return {
            name: {
                "http_p50_ms": round(float(np.median([p for p, _ in got])), 3),
                "batch_docs_per_s": round(float(np.median([d for _, d in got])), 1),
                "rounds": [[round(p, 3), round(d, 1)] for p, d in got],
            }
            for name, got in runs.items()
        }
    finally:
        for _, proc in servers.values():
            proc.terminate()
            proc.wait(timeout=30)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--first", type=Path, required=True, help="the first-stage bundle (XR-Linear)")
    ap.add_argument("--lamp", type=Path, required=True, help="the LaMP bundle (fp32 re-ranker)")
    ap.add_argument("--lamp-int8", type=Path, default=None, help="the same run exported with --quantize int8")
    ap.add_argument(
        "--also", action="append", default=[], metavar="NAME=PATH", help="another LaMP bundle as a row (repeatable)"
    )
    ap.add_argument("--old-code", type=Path, default=None, help="a folder holding the older commit's xtag package")
    ap.add_argument("--test", type=Path, default=Path("/work/shared/data/debtags/test.jsonl.gz"))
    ap.add_argument("--test-limit", type=int, default=None, help="first N test texts only (smoke runs; no result)")
    ap.add_argument("--latency-texts", type=int, default=200)
    ap.add_argument("--batch", type=int, default=256, help="documents per /v1/predict/batch request")
    ap.add_argument("--batch-docs", type=int, default=2048, help="documents per round of batch requests")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--note", default="", help="what the rows' LaMP run is (said beside the table)")
    ap.add_argument("--result-name", default="lamp_fast_debtags")
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    (ROOT / "bench" / "out").mkdir(exist_ok=True)
    test = load_corpus(subset(args.test, ROOT / "bench" / "out" / "lamp_fast_test.jsonl", args.test_limit))
    texts = test.texts
    bundles = {"first stage alone": args.first, "LaMP, this code": args.lamp}
    if args.lamp_int8 is not None:
        bundles["LaMP int8, this code"] = args.lamp_int8
    for item in args.also:
        name, _, path = item.rpartition("=")  # the last "=": a row name may hold one (C=30)
        bundles[name] = Path(path)
    rows: dict[str, dict] = {}
    for name, path in bundles.items():
        bundle = load_bundle(path)
        rows[name] = {"bundle": str(path), **quality(bundle, test)}
        if name != "first stage alone":
            rows[name]["in_process"] = added_p50(bundle, texts[: args.latency_texts], 1)
        print(name, json.dumps(rows[name]), flush=True)
    servers = {name: (Path(row["bundle"]), None) for name, row in rows.items()}
    if args.old_code is not None:
        rows = {
            "LaMP, code before": {**rows["LaMP, this code"], "in_process": None, "code": str(args.old_code)},
            **rows,
        }
        servers = {"LaMP, code before": (args.lamp, args.old_code), **servers}
    http = http_rows(servers, texts, args)
    for name in rows:
        rows[name] = {**rows[name], **http[name]}
    result = {"rows": rows, "goals": GOALS, "test_docs": len(texts), "batch": args.batch, "note": args.note}
    result["export"] = {
        name: json.loads((Path(row["bundle"]) / "manifest.json").read_text()).get("export")
        for name, row in rows.items()
    }
    print(json.dumps(result, indent=1), flush=True)
    if not args.test_limit:
        save_result(args.result_name, result)


if __name__ == "__main__":
    main()
