"""LightXML's learning speed on a debtags subset (issue 29): one change at a time, CascadeXML beside it, CPU only.

    .venv/bin/python -m bench.experiments.lightxml_subset --variant baseline
    .venv/bin/python -m bench.experiments.lightxml_subset --variant heads-10x --set lr_head=1e-3
    .venv/bin/python -m bench.experiments.lightxml_subset --variant cascadexml --family cascadexml

Each invocation trains one variant on the first --train-docs training documents (the same budget for all:
--epochs epochs, --max-length tokens, batch --batch-size, seed 0) through the product path: `train_run` →
`export_run` (one ONNX graph, parity-checked; fusions off to save time, accuracy is the graph's either way)
→ `load_bundle` → `evaluate_bundle` on the first --test-docs test documents (XMC convention). `--set k=v`
(repeatable, JSON values) overrides the family's config, so each row names exactly what it changed against
the family's defaults. Results accumulate in <workdir>/results.json and bench/results/<--result-name>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

from xtag.corpus.files import load_corpus
from xtag.evaluation.evaluate import evaluate_bundle
from xtag.models.bundle.loader import load_bundle
from xtag.training.config import TrainConfig
from xtag.training.export.export_run import export_run
from xtag.training.run import train_run

from bench.helpers.results import ROOT, logged_commands, save_result
from bench.helpers.transformer import subset

METRICS = ("P@1", "P@3", "P@5", "PSP@5", "macro-R@5")


def overrides(pairs: list[str]) -> dict:
    """`k=v` pairs as a dict, each value parsed as JSON when it is JSON (numbers, null, lists), else a string."""
    out = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def shared_subset(src: Path, dst: Path, limit: int) -> Path:
    """`subset`, written once and renamed into place: variants run side by side share the file."""
    if not dst.exists():
        tmp = dst.with_suffix(f".{os.getpid()}.tmp")
        os.replace(subset(src, tmp, limit), dst)
    return dst


def validations(run: Path) -> list[dict]:
    events = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    return [{k: e[k] for k in ("step", "P@1", "P@5")} for e in events if e["event"] == "validate"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "debtags")
    ap.add_argument("--workdir", type=Path, default=ROOT / "bench" / "out" / "lightxml_subset")
    ap.add_argument("--variant", required=True, help="row name")
    ap.add_argument("--family", default="lightxml", choices=("lightxml", "cascadexml"))
    ap.add_argument("--set", action="append", default=[], help="config override k=v (JSON value), repeatable")
    ap.add_argument("--train-docs", type=int, default=3000)
    ap.add_argument("--test-docs", type=int, default=1500)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--max-length", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--result-name", default="lightxml_subset_debtags")
    args = ap.parse_args()
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    train = shared_subset(args.data / "train.jsonl.gz", work / f"train-{args.train_docs}.jsonl", args.train_docs)
    test = load_corpus(
        shared_subset(args.data / "test.jsonl.gz", work / f"test-{args.test_docs}.jsonl", args.test_docs)
    )
    changed = overrides(args.set)
    settings = {
        "max_length": args.max_length,
        "batch_size": args.batch_size,
        "epochs": args.epochs,
        "device": "cpu",
        "checkpoint_every": 10_000,
        **changed,
    }
    config = TrainConfig.model_validate({"corpus": str(train), "model": args.family, args.family: settings})
    run, bundle = work / f"{args.variant}-run", work / f"{args.variant}-bundle"
    shutil.rmtree(run, ignore_errors=True)
    start = time.perf_counter()
    train_run(config, run, progress=False)
    train_s = time.perf_counter() - start
    export_run(run, bundle, overwrite=True, optimize=False)
    metrics, info = evaluate_bundle(load_bundle(bundle), test, progress=False)
    entry = {
        "family": args.family,
        "changed": changed,
        "metrics": {m: round(metrics[m], 2) for m in METRICS},
        "convention": info["convention"],
        "train_seconds": round(train_s, 1),
        "budget": {k: getattr(args, k) for k in ("train_docs", "test_docs", "epochs", "max_length", "batch_size")},
        "validations": validations(run) if args.family == "lightxml" else [],
    }
    results_path = work / "results.json"
    results = {**(json.loads(results_path.read_text()) if results_path.exists() else {}), args.variant: entry}
    results_path.write_text(json.dumps(results, indent=2))
    print(json.dumps({args.variant: entry}), flush=True)
    save_result(args.result_name, {"variants": results}, command=logged_commands(work / "commands.json"))


if __name__ == "__main__":
    main()
