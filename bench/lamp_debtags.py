"""LaMP re-ranking XR-Linear on debtags: the first stage alone vs first stage + LaMP, CPU only.

    .venv/bin/python bench/lamp_debtags.py --data ../shared/data/debtags --epochs 3

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
import gzip
import json
import os
import random
import time
from pathlib import Path

import numpy as np
from lightxml_debtags import p50_ms
from results import save_result
from xr_transformer_debtags import ROOT, HttpPredict, ThreadServer, subset
from xtag.evaluation.evaluate import ground_truth
from xtag.models.bundle.loader import load_bundle
from xtag.models.inference.corpus import predict_corpus
from xtag.models.metrics import evaluate, set_metrics
from xtag.training.config import TrainConfig
from xtag.training.data.corpus import load_corpus
from xtag.training.export.export_run import export_run
from xtag.training.lamp.config import LampConfig
from xtag.training.run import train_run
from xtag.training.xr_transformer.config import XRTransformerConfig

METRICS = ("P@1", "P@3", "P@5", "PSP@5", "macro-F1@5")
SET_K = 10  # labels per text the set metrics threshold (debtags texts have 3.7 on average)
THRESHOLDS = np.round(np.arange(0.05, 0.96, 0.025), 3)


def split(train: Path, work: Path, fractions: tuple[float, float], seed: int) -> tuple[Path, Path, Path]:
    """first-stage, lamp and validation jsonl files: the training rows shuffled with `seed`, cut by `fractions`
    (the lamp and validation parts' shares; the first stage gets the rest)."""
    with gzip.open(train, "rt") as fh:
        rows = fh.read().splitlines()
    random.Random(seed).shuffle(rows)
    n_lamp, n_val = int(len(rows) * fractions[0]), int(len(rows) * fractions[1])
    parts = {"first": rows[n_lamp + n_val :], "lamp": rows[:n_lamp], "val": rows[n_lamp : n_lamp + n_val]}
    paths = []
    for name, part in parts.items():
        path = work / f"{name}.jsonl"
        path.write_text("\n".join(part) + "\n")
        paths.append(path)
    return tuple(paths)


def train_export(config: TrainConfig, folder: Path) -> tuple[Path, dict]:
    """folder/bundle of `config` (trained into folder/run unless already there), and the run's summary."""
    if not (folder / "run" / "model").is_dir():
        train_run(config, folder / "run", resume=(folder / "run" / "config.json").exists(), progress=True)
    if not (folder / "bundle").is_dir():
        export_run(folder / "run", folder / "bundle")
    return folder / "bundle", json.loads((folder / "run" / "summary.json").read_text())


def cross_fit_split(data: Path, work: Path) -> tuple[Path, Path, Path, dict]:
    """The cross-fitting benches' split: all of TRAIN but 5 % held out for validation (first stage and LaMP on the
    same texts), and the XR-Linear first stage trained on it: (its corpus, the validation file, bundle, summary)."""
    corpus, _, val_path = split(data / "train.jsonl.gz", work, (0.0, 0.05), 0)
    bundle, summary = train_export(TrainConfig(corpus=corpus), work / "xlinear")
    return corpus, val_path, bundle, summary


def scored(bundle, corpus) -> tuple:
    """Top-SET_K predictions of `bundle` on `corpus` (rows of the served path) and the corpus's ground truth."""
    preds = predict_corpus(bundle, corpus.texts, SET_K, progress=True)
    return preds, ground_truth(corpus, bundle.predictor.vocab)


def best_threshold(bundle, val) -> tuple[float, float]:
    """The grid threshold with the best example-based F1 on the validation split, and that F1."""
    preds, truth = scored(bundle, val)
    f1 = [set_metrics(preds.labels, preds.scores, truth.Y, t)["example-F1"] for t in THRESHOLDS]
    return float(THRESHOLDS[int(np.argmax(f1))]), round(float(max(f1)), 2)


def quality(bundle, test, threshold: float) -> dict:
    preds, truth = scored(bundle, test)
    ranked = evaluate(preds.labels, truth.Y, (1, 3, 5), truth.propensity)
    sets = set_metrics(preds.labels, preds.scores, truth.Y, threshold)
    return {
        **{m: round(ranked[m], 2) for m in METRICS},
        **{f"set {m}": round(v, 2) for m, v in sets.items()},
        "threshold": threshold,
    }


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
