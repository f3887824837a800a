"""LightXML on debtags: dynamic vs static negatives (paper Table 5) under one step budget, CPU only.

    nohup .venv/bin/python -m bench.lightxml_debtags --max-length 128 --batch-size 16 --max-steps 600 \
        > bench/out/lightxml/run.log 2>&1 &

Every variant goes through the product path: `train_run` → `export_run` (one ONNX graph, parity
checked) → `load_bundle` → `evaluate_bundle` on the 5,910-document test split, so the figures are
those of the served bundle (onnxruntime + numpy). Model selection uses the run's own held-out
validation split (5 % of train), never the test set. Also: single-text latency p50 at exactly
128 tokens of `Predictor.predict` vs the bare ONNX forward. Results: <workdir>/results.json (accumulating
over invocations: one variant or budget per run, then --latency-only) and bench/results/<--result-name>.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from xtag.corpus.files import load_corpus
from xtag.evaluation.evaluate import evaluate_bundle
from xtag.models.bundle.loader import load_bundle
from xtag.models.features.onnx_encoder import TextTokenizer
from xtag.training.config import TrainConfig
from xtag.training.deep.loop import steps_per_epoch
from xtag.training.lightxml.config import LightXMLConfig
from xtag.training.run import train_run

from bench.helpers.results import ROOT, logged_commands, save_result
from bench.helpers.transformer import LATENCY_TOKENS, METRICS, p50_ms, run_variant, subset


def latencies(bundle: Path, texts: list[str], n: int) -> dict:
    """p50 single-text latency at exactly 128 tokens: bare ONNX forward vs the bundle's whole predict."""
    predictor = load_bundle(bundle).predictor
    encoder = predictor.featurizer  # xtag.models.lightxml.LightXMLEncoder
    tok = TextTokenizer.load(bundle / "encoder" / "tokenizer.json", LATENCY_TOKENS)
    encoder.onnx.tokenizer = tok  # measure at 128 tokens even if the model was trained shorter
    long = [t for t in texts if len(tok.tokenizer.encode(t).ids) >= LATENCY_TOKENS][:n]
    session = encoder.onnx.session
    feeds = [dict(zip(("input_ids", "attention_mask"), tok([t]))) for t in long]
    # One method at a time: interleaving lets one runtime's spinning threads slow the next.
    p50 = {
        "onnx_forward": p50_ms(lambda i: session.run(None, feeds[i]), len(long)),
        "tokenize_and_forward": p50_ms(lambda i: encoder.transform([long[i]]), len(long)),
        "predict": p50_ms(lambda i: predictor.predict([long[i]], k=5), len(long)),
    }
    return {
        "texts": len(long),
        "tokens": LATENCY_TOKENS,
        **{f"{k}_p50_ms": round(v, 3) for k, v in p50.items()},
        "predict_overhead_over_onnx_ms": round(p50["predict"] - p50["onnx_forward"], 3),
    }


def log_facts(run: Path) -> dict:
    events = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    done = [e for e in events if e["event"] == "lightxml_done"]
    return {
        "validations": [
            {k: e[k] for k in ("step", "P@1", "P@3", "P@5", "swa_models")} for e in events if e["event"] == "validate"
        ],
        "static_negatives_seconds": sum(e["seconds"] for e in events if e["event"] == "static_negatives"),
        "training": done[-1] if done else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "debtags")
    ap.add_argument("--workdir", type=Path, default=ROOT / "bench" / "out" / "lightxml")
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-steps", type=int, default=600, help="optimiser steps per variant (CPU budget)")
    ap.add_argument("--swa-from", type=float, default=2 / 3, help="SWA from this fraction of the step budget")
    ap.add_argument("--swa-every", type=int, default=25)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--limit", type=int, default=None, help="first N rows of each split (smoke runs)")
    ap.add_argument("--latency-texts", type=int, default=100)
    ap.add_argument("--variants", default="dynamic,static", help="negative sampling of each variant")
    ap.add_argument("--lr-head", type=float, default=None, help="heads' learning rate (default: LightXMLConfig's)")
    ap.add_argument("--suffix", default="", help="appended to the variant names (runs with other budgets)")
    ap.add_argument("--latency-only", action="store_true", help="re-measure the latency of finished bundles")
    ap.add_argument(
        "--result-name", default=None, help="bench/results/<name>.json (default: lightxml_<data folder name>)"
    )
    args = ap.parse_args()
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    train_path = subset(args.data / "train.jsonl.gz", work / "train.jsonl", args.limit)
    test = load_corpus(subset(args.data / "test.jsonl.gz", work / "test.jsonl", args.limit))
    n_train = len(load_corpus(train_path))
    lc = LightXMLConfig(
        max_length=args.max_length,
        batch_size=args.batch_size,
        epochs=1,
        max_steps=args.max_steps,
        device="cpu",
        swa_every=args.swa_every,
        eval_every=args.eval_every,
        checkpoint_every=100,
    )
    per_epoch = steps_per_epoch(n_train - round(lc.val_fraction * n_train), 1, lc.batch_size, lc.grad_accum)
    # SWA "over the last epochs": with a step cap below one epoch, over the last third of the budget.
    lc.swa_start = args.swa_from * min(args.max_steps, per_epoch) / per_epoch
    results_path = work / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    commands = logged_commands(work / "commands.json")  # results.json accumulates over invocations
    result_name = args.result_name or f"lightxml_{args.data.resolve().name}"
    if args.latency_only:  # quieter machine later: all bundles re-measured in one run, one after the other
        for name in [n for n in results if n != "args"]:  # ("args": written by the first runs of this script)
            results[name]["latency"] = latencies(work / f"{name}-bundle", test.texts, args.latency_texts)
            print(json.dumps({name: results[name]["latency"]}), flush=True)
        results_path.write_text(json.dumps(results, indent=2))
        save_result(result_name, results, command=commands)
        return
    for negatives in args.variants.split(","):
        name = negatives + args.suffix
        config = TrainConfig(
            corpus=train_path,
            model="lightxml",
            lightxml=lc.model_copy(update={"negatives": negatives, "lr_head": args.lr_head}),  # None: 10 × lr
        )
        run = work / f"{name}-run"
        if (run / "config.json").exists() and not (run / "model").is_dir():  # finish an interrupted run first
            train_run(config, run, resume=True, progress=True)
        entry = {**run_variant(name, config, work, None, quantize=False), **log_facts(run)}
        bundle = work / f"{name}-bundle"
        start = time.perf_counter()
        metrics, info = evaluate_bundle(load_bundle(bundle), test, progress=True)  # the XMC convention
        entry["eval_seconds"] = round(time.perf_counter() - start, 1)
        entry["metrics"] = {m: round(metrics[m], 2) for m in METRICS}
        entry["convention"] = info["convention"]  # per variant: results.json accumulates over invocations
        entry["unseen_test_label_mentions"] = info["unknown_label_mentions"]
        entry["latency"] = latencies(bundle, test.texts, args.latency_texts)
        entry["args"] = {k: str(v) for k, v in vars(args).items()}
        # Variants may run as separate processes (one per budget): keep what the others wrote.
        results = {**(json.loads(results_path.read_text()) if results_path.exists() else {}), name: entry}
        results_path.write_text(json.dumps(results, indent=2))
        print(json.dumps({name: entry["metrics"], "latency": entry["latency"]}), flush=True)
    print(json.dumps(results, indent=2))
    save_result(result_name, results, command=commands)


if __name__ == "__main__":
    main()
