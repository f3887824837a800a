"""CascadeXML's int8 weights and missing-label loss on a debtags subset, CPU: what each costs or buys.

    .venv/bin/python -m bench.experiments.cascadexml_variants_debtags --train-docs 2000 --max-length 32 --epochs 1

Two runs on the first --train-docs training documents, through the product path (`train_run` →
`export_run` → `load_bundle` → `evaluate_bundle`): plain BCE, and the `unbiased-balanced` missing-label
loss (`xtag train --loss unbiased-balanced`). The plain run is exported as fp32 and with int8 weights
(`xtag export --quantize int8`); the three bundles are evaluated on the test split (the first --test-docs
documents, all by default), and single texts are timed (`Predictor.predict`, k=5, p50 after warm-up) on
the fp32 and int8 bundles at the runs' own max length. Prints the figures as JSON; nothing is written
to bench/results (a small budget for a quick comparison, not a table row).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from xtag.corpus.files import load_corpus
from xtag.evaluation.evaluate import evaluate_bundle
from xtag.models.bundle.loader import load_bundle
from xtag.training.config import TrainConfig
from xtag.training.export.export_run import export_run
from xtag.training.run import train_run

from bench.helpers.results import ROOT
from bench.helpers.transformer import p50_ms, subset

METRICS = ("P@1", "P@5", "PSP@5", "macro-R@5")
CASCADE = {"branching": 16, "max_leaf_size": 8, "top_k": [4, 16]}  # as bench/cascadexml_debtags.py


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "debtags")
    ap.add_argument("--workdir", type=Path, default=ROOT / "bench" / "out" / "cascadexml_variants")
    ap.add_argument("--train-docs", type=int, default=2000)
    ap.add_argument("--test-docs", type=int, default=None)
    ap.add_argument("--max-length", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--latency-texts", type=int, default=100)
    args = ap.parse_args()
    work = args.workdir
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    train = subset(args.data / "train.jsonl.gz", work / "train.jsonl", args.train_docs)
    test = load_corpus(subset(args.data / "test.jsonl.gz", work / "test.jsonl", args.test_docs))
    settings = {**CASCADE, "max_length": args.max_length, "epochs": args.epochs, "batch_size": args.batch_size}
    bundles, out = {}, {}
    for loss in ("none", "unbiased-balanced"):
        config = TrainConfig.model_validate(
            {
                "corpus": str(train),
                "model": "cascadexml",
                "cascadexml": {**settings, "device": "cpu"},
                "missing_labels": {"weighting": loss},
            }
        )
        start = time.perf_counter()
        train_run(config, work / loss, progress=False)
        out[loss] = {"train_s": round(time.perf_counter() - start, 1)}
        for precision in ("fp32", "int8") if loss == "none" else ("fp32",):
            name = loss if precision == "fp32" else f"{loss}-{precision}"
            manifest = export_run(work / loss, work / f"{name}-bundle", precision=precision)
            bundles[name] = work / f"{name}-bundle"
            if precision != "fp32":
                out[name] = {"export": manifest["export"][precision]}
    for name, bundle in bundles.items():
        metrics, info = evaluate_bundle(load_bundle(bundle), test, progress=False)
        out.setdefault(name, {})["metrics"] = {m: round(metrics[m], 2) for m in METRICS}
        out[name]["convention"] = info["convention"]
    texts = test.texts[: args.latency_texts]
    for name in ("none", "none-int8"):
        predictor = load_bundle(bundles[name]).predictor
        out[name]["predict_p50_ms"] = round(p50_ms(lambda i: predictor.predict([texts[i]], k=5), len(texts)), 2)
    events = [json.loads(line) for line in (work / "unbiased-balanced" / "train_log.jsonl").read_text().splitlines()]
    out["unbiased-balanced"]["head_weights"] = next(e for e in events if e["event"] == "head_weights")
    summary = json.loads((work / "none" / "summary.json").read_text())
    result = {"budget": vars(args) | {"resolutions": summary["resolutions"]}, "variants": out}
    print(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()
