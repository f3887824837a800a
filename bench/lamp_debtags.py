"""LaMP re-ranking XR-Linear on debtags: the first stage alone vs first stage + LaMP, CPU only.

    .venv/bin/python -m bench.lamp_debtags --data ../shared/data/debtags --epochs 3

The training split is cut in three by a seeded shuffle: XR-Linear (the first stage) trains on the first
part, LaMP on the second (texts the first stage never saw, so its candidates and scores look as they
will at test time: on its own training texts XR-Linear's top-50 holds nearly every true label with
over-confident scores), and the third is the validation split the set metrics' threshold is tuned on
(one global threshold per model, the best example-based F1 on a grid). Both bundles go through the
product path (`train_run` → `export_run` → `load_bundle`) and are scored on the whole test split:
P@1/3/5, PSP@5, macro-F1@5 (`evaluate`), and the set metrics at the tuned threshold (top-10 labels
scoring above it). Latency: `POST /v1/predict` (k=5) on the LaMP bundle's in-thread server, with
`"rerank": false` (the first stage alone, same process) and without; the added p50 is the difference.

With `--cross-fit K` there is no LaMP part: the first stage and LaMP both train on all but the validation
part, LaMP on out-of-fold candidates (lamp.cross_fit, training/lamp/cross_fit.py), so the first stage it
is compared with is the one a user would serve alone.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
from xtag.corpus.files import load_corpus
from xtag.models.bundle.loader import load_bundle
from xtag.training.config import TrainConfig
from xtag.training.lamp.config import LampConfig
from xtag.training.xr_transformer.config import XRTransformerConfig

from bench.helpers.lamp import METRICS, best_threshold, quality, split, train_export
from bench.helpers.results import ROOT, save_result
from bench.helpers.transformer import HttpPredict, ThreadServer, p50_ms, subset


def http_p50(bundle: Path, texts: list[str]) -> dict:
    """p50 ms of POST /v1/predict (k=5) with and without the second stage, one server, interleaved runs."""
    server = ThreadServer(bundle)
    clients = {"rerank": HttpPredict(server.port), "first_stage": HttpPredict(server.port, extra={"rerank": False})}
    try:
        runs = {name: [] for name in clients}
        for _ in range(2):  # two alternating passes: drift in the machine's load hits both alike
            for name, client in clients.items():
                runs[name].append(p50_ms(lambda i: client(texts[i]), len(texts)))
        out = {f"{name}_p50_ms": round(float(np.median(v)), 3) for name, v in runs.items()}
        out["added_p50_ms"] = round(out["rerank_p50_ms"] - out["first_stage_p50_ms"], 3)
        out["texts"] = len(texts)
        return out
    finally:
        for client in clients.values():
            client.close()
        server.close()


def first_stage_config(args: argparse.Namespace, corpus: Path) -> TrainConfig:
    """XR-Linear with its defaults, or XR-Transformer at the equal-budget table's CPU budget (--first-epochs
    epochs of MiniLM-L6 at --first-max-length tokens, batches of 16)."""
    if args.first_stage == "xlinear":
        return TrainConfig(corpus=corpus)
    xr = XRTransformerConfig(
        epochs=args.first_epochs, max_length=args.first_max_length, batch_size=16, device="cpu", log_every=50
    )
    return TrainConfig(corpus=corpus, model="xr-transformer", xr_transformer=xr)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "debtags")
    ap.add_argument("--workdir", type=Path, default=ROOT / "bench" / "out" / "lamp")
    ap.add_argument("--lamp-fraction", type=float, default=0.2)
    ap.add_argument("--val-fraction", type=float, default=0.05)
    ap.add_argument("--graph", choices=("fc", "pr"), default="fc")
    ap.add_argument("--candidates", type=int, default=50)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--max-length", type=int, default=64)
    ap.add_argument("--encoder-layers", type=int, default=2, help="MiniLM's first N layers (CPU budget)")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument(
        "--cross-fit",
        type=int,
        default=0,
        help="lamp.cross_fit=K: LaMP trains on the first stage's own corpus (--lamp-fraction is ignored) with "
        "out-of-fold candidates",
    )
    ap.add_argument("--no-teacher-forcing", action="store_true", help="lamp.teacher_forcing=false")
    ap.add_argument("--first-stage", choices=("xlinear", "xr-transformer"), default="xlinear")
    ap.add_argument("--first-epochs", type=int, default=1, help="with --first-stage xr-transformer")
    ap.add_argument("--first-max-length", type=int, default=64, help="with --first-stage xr-transformer")
    ap.add_argument("--latency-texts", type=int, default=200)
    ap.add_argument("--result-name", default=None)
    ap.add_argument("--test-limit", type=int, default=None, help="first N test texts only (smoke runs; no result)")
    args = ap.parse_args()
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    lamp_fraction = 0.0 if args.cross_fit else args.lamp_fraction
    first_path, lamp_path, val_path = split(args.data / "train.jsonl.gz", work, (lamp_fraction, args.val_fraction), 0)
    lamp_path = first_path if args.cross_fit else lamp_path
    first_bundle, first_summary = train_export(first_stage_config(args, first_path), work / args.first_stage)
    variant = f"lamp-{args.graph}-c{args.candidates}-e{args.epochs}-len{args.max_length}-l{args.encoder_layers}"
    variant += "-notf" if args.no_teacher_forcing else ""
    variant += f"-cf{args.cross_fit}" if args.cross_fit else ""
    variant += "" if args.first_stage == "xlinear" else f"-on-{args.first_stage}"  # its own run: never reuse another's
    lamp = LampConfig(
        first_stage=first_bundle,
        candidates=args.candidates,
        graph=args.graph,
        epochs=args.epochs,
        max_length=args.max_length,
        encoder_layers=args.encoder_layers,
        dim=args.dim,
        lr=args.lr,
        teacher_forcing=not args.no_teacher_forcing,
        cross_fit=args.cross_fit,
        device="cpu",
        log_every=20,
    )
    lamp_bundle, lamp_summary = train_export(TrainConfig(corpus=lamp_path, model="lamp", lamp=lamp), work / variant)
    events = [json.loads(line) for line in (work / variant / "run" / "train_log.jsonl").read_text().splitlines()]
    val = load_corpus(val_path)
    test = load_corpus(subset(args.data / "test.jsonl.gz", work / "test.jsonl", args.test_limit))
    bundles = {"first": load_bundle(first_bundle), "lamp": load_bundle(lamp_bundle)}
    sample = test.texts[:300]
    alone = bundles["lamp"].predictor.predict(sample, k=5, rerank=False)
    direct = bundles["first"].predictor.predict(sample, k=5)
    rows = {}
    for name, bundle in bundles.items():
        threshold, val_f1 = best_threshold(bundle, val)
        start = time.perf_counter()
        rows[name] = {**quality(bundle, test, threshold), "val_example_F1": val_f1}
        rows[name]["test_predict_s"] = round(time.perf_counter() - start, 1)
    latency = http_p50(lamp_bundle, test.texts[: args.latency_texts])
    result = {
        "variant": variant,
        "split": {
            "first_stage_docs": first_summary["documents"],
            "lamp_docs": lamp_summary["documents"],
            "val_docs": len(val),
            "test_docs": len(test),
        },
        "first_stage_model": args.first_stage,
        "first_stage": rows["first"],
        "lamp": rows["lamp"],
        "delta": {m: round(rows["lamp"][m] - rows["first"][m], 2) for m in METRICS},
        "rerank_false_equals_first_stage": bool(
            np.array_equal(alone.labels, direct.labels) and np.array_equal(alone.scores, direct.scores)
        ),
        "latency": latency,
        "lamp_training": {
            "candidates": next(e for e in events if e["event"] == "lamp_candidates"),
            "setup": next(e for e in events if e["event"] == "lamp"),
            "cross_fit_folds": [e for e in events if e["event"] == "lamp_cross_fit"],
            "summary": lamp_summary,
            "config": json.loads(lamp.model_dump_json()),
        },
        "export": json.loads((lamp_bundle / "manifest.json").read_text()).get("export"),
        f"{args.first_stage}_train_s": first_summary["total_seconds"],
        "load_average_end": os.getloadavg(),
    }
    print(json.dumps(result, indent=1), flush=True)
    if args.test_limit is None:
        save_result(args.result_name or f"lamp_debtags_{args.graph}", result)


if __name__ == "__main__":
    main()
