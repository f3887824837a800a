"""`xtag update` against a full retrain (issue 26): labels removed from TRAIN, then added back by an update.

Usage (from the repository root):
    .venv/bin/python -m bench.update_labels --data ../shared/data/debtags [--out bench/out/update_debtags]

1. A seeded 10 % of TRAIN's label names is removed from TRAIN only (a document left with no label is left out);
   the base run is trained on that (XR-Linear, default settings).
2. `xtag update` (training/update_run.py) adds them back from the TRAIN documents that carry a removed label,
   with all their labels (same ids: they replace their reduced rows), once per `--clusters` placement: new (the
   default: a subtree of their own), refit (the nearest old clusters, those and their ancestors retrained) and
   keep (the nearest old clusters, only the new labels' rankers trained).
3. A full retrain on all of TRAIN, same settings.
With --validation, TRAIN is first cut into a seeded 90 % (TRAIN for every run) and 10 % (measured on instead of
TEST), and the default placement is compared with itself without the gate weights (an ablation: the weights'
function patched to ones), the question the weights were chosen on TEST for.
Both are measured on TEST (XMC convention: every test mention counts): P@5 and PSP@5 over all labels; recall@5
of the added labels (their test mentions found in the top 5); P@5 of old labels only (hits on old labels / 5);
and how many of the base run's old-label predictions (top 5) the update changed. Update and retrain run one
after the other in the same process, so their time ratio shares the machine's load (recorded beside them).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import time
from contextlib import nullcontext
from pathlib import Path
from unittest.mock import patch

import numpy as np
from xtag.corpus.files import load_corpus
from xtag.evaluation.evaluate import ground_truth
from xtag.models.bundle.loader import load_bundle
from xtag.models.metrics import evaluate
from xtag.models.tagging.batches import predict_corpus
from xtag.training.config import TrainConfig
from xtag.training.export.export_run import export_run
from xtag.training.run import train_run
from xtag.training.update_run import update_run

from bench.helpers.results import save_result

K = 5
# run name -> `xtag update --clusters` value; "updated" is the default placement
VARIANTS = {"updated": "new", "refit": "refit", "kept": "keep"}
# --validation: the default against itself without the gate weights (training/tree/graft.py), an ablation
VALIDATION_VARIANTS = {"updated": "new", "unweighted": "new"}
SECONDS = {"updated": "update", "refit": "update_refit", "kept": "update_kept", "unweighted": "update_unweighted"}


def without_gate_weights():
    """The ablation: every new top cluster's positives weigh 1, as before the gate weights."""
    return patch("xtag.training.xlinear.update.gate_positive_weights", lambda Y: np.ones(Y.shape[1], dtype=np.float64))


def validation_split(train: Path, out: Path, seed: int) -> tuple[Path, Path]:
    """TRAIN cut into a seeded 90 % (the new TRAIN) and 10 % (what is measured on, instead of TEST)."""
    rows = gzip.open(train, "rt", encoding="utf-8").read().splitlines()
    held = np.random.default_rng(seed + 1).random(len(rows)) < 0.1
    fit, val = out / "fit.jsonl.gz", out / "val.jsonl.gz"
    for path, keep in ((fit, ~held), (val, held)):
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            fh.write("".join(line + "\n" for line, k in zip(rows, keep) if k))
    return fit, val


def split_labels(train: Path, out: Path, fraction: float, seed: int) -> tuple[Path, Path, list[str]]:
    """reduced.jsonl.gz (TRAIN without the removed labels) and added.jsonl.gz (TRAIN rows with any of them, whole)."""
    rows = [json.loads(line) for line in gzip.open(train, "rt", encoding="utf-8")]
    names = sorted({n for r in rows for n in r["labels"]})
    rng = np.random.default_rng(seed)
    removed = sorted(rng.choice(names, size=max(1, round(fraction * len(names))), replace=False).tolist())
    gone = set(removed)
    reduced, added = out / "reduced.jsonl.gz", out / "added.jsonl.gz"
    with gzip.open(reduced, "wt", encoding="utf-8") as r_fh, gzip.open(added, "wt", encoding="utf-8") as a_fh:
        for row in rows:
            kept = [n for n in row["labels"] if n not in gone]
            if kept:
                r_fh.write(json.dumps({**row, "labels": kept}) + "\n")
            if len(kept) < len(row["labels"]):
                a_fh.write(json.dumps(row) + "\n")
    return reduced, added, removed


def top_names(bundle_dir: Path, texts: list[str]) -> tuple[list[list[str]], object]:
    bundle = load_bundle(bundle_dir)
    preds = predict_corpus(bundle, texts, K, progress=False, calibrated=False)
    names = bundle.predictor.vocab.names
    return [[names[j] for j in row if j >= 0] for row in preds.labels.tolist()], (bundle, preds)


def quality(bundle_and_preds, test, top: list[list[str]], removed: set[str]) -> dict:
    bundle, preds = bundle_and_preds
    truth = ground_truth(test, bundle.predictor.vocab)
    m = evaluate(preds.labels, truth.Y, (K,), truth.propensity, "xmc")
    hits_added = sum(len(set(t) & set(p) & removed) for t, p in zip(test.labels, top))
    mentions_added = sum(len(set(t) & removed) for t in test.labels)
    hits_old = sum(len((set(t) & set(p)) - removed) for t, p in zip(test.labels, top))
    return {
        "P@5": round(m[f"P@{K}"], 3),
        "PSP@5": round(m[f"PSP@{K}"], 3),
        "added_recall@5": round(100 * hits_added / max(mentions_added, 1), 3),
        "old_P@5": round(100 * hits_old / (K * len(test)), 3),
    }


def changed_old(base: list[list[str]], new: list[list[str]], removed: set[str]) -> dict:
    """How many of the base run's top-5 predictions (old labels all) a model no longer makes, and on how many
    documents its old labels in the top 5 are not the base run's first ones in the base run's order."""
    total = sum(len(b) for b in base)
    gone = sum(len(set(b) - set(n)) for b, n in zip(base, new))
    kept = 0
    for b, n in zip(base, new):
        old = [x for x in n if x not in removed]
        kept += old == b[: len(old)]
    return {
        "old_predictions": total,
        "old_predictions_dropped": gone,
        "old_predictions_dropped_pct": round(100 * gone / max(total, 1), 2),
        "docs_old_order_kept_pct": round(100 * kept / len(base), 2),
    }


def goals(seconds: float, retrain_seconds: float, row: dict, full: dict) -> dict:
    """The issue's goals for one update variant against the full retrain."""
    return {
        "update_time_le_20pct": seconds <= 0.2 * retrain_seconds,
        "added_recall_ge_90pct_of_retrain": row["added_recall@5"] >= 0.9 * full["added_recall@5"],
        "old_P@5_within_0.2": abs(row["old_P@5"] - full["old_P@5"]) <= 0.2,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("../shared/data/debtags"))
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--fraction", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--result-name", default=None)
    ap.add_argument(
        "--validation",
        action="store_true",
        help="measure on a seeded 10 %% of TRAIN (held out of every run) instead of TEST, the default placement "
        "against itself without gate weights",
    )
    args = ap.parse_args()
    name = args.data.resolve().name
    out = args.out or Path("bench/out") / f"update_{name}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    train_file, test_file = args.data / "train.jsonl.gz", args.data / "test.jsonl.gz"
    if args.validation:
        train_file, test_file = validation_split(train_file, out, args.seed)
    variants = VALIDATION_VARIANTS if args.validation else VARIANTS
    runs = ("base", *variants, "full")
    reduced, added, removed = split_labels(train_file, out, args.fraction, args.seed)
    gone = set(removed)
    seconds = {}
    t = time.perf_counter()
    train_run(TrainConfig(corpus=reduced), out / "base-run", progress=False)
    seconds["base_train"] = time.perf_counter() - t
    load, summaries = {}, {}
    for run, placement in variants.items():
        load[f"before_{SECONDS[run]}"] = os.getloadavg()[0]
        t = time.perf_counter()
        with without_gate_weights() if run == "unweighted" else nullcontext():
            summaries[run] = update_run(out / "base-run", added, out / f"{run}-run", progress=False, clusters=placement)
        seconds[SECONDS[run]] = time.perf_counter() - t
    load["before_retrain"] = os.getloadavg()[0]
    t = time.perf_counter()
    train_run(TrainConfig(corpus=train_file), out / "full-run", progress=False)
    seconds["retrain"] = time.perf_counter() - t
    load["after_retrain"] = os.getloadavg()[0]
    for run in runs:
        export_run(out / f"{run}-run", out / f"{run}-bundle", f"{name}-{run}", overwrite=True)
    test = load_corpus(test_file)
    tops = {run: top_names(out / f"{run}-bundle", test.texts) for run in runs}
    rows = {run: quality(tops[run][1], test, tops[run][0], gone) for run in tops}
    facts = {
        "data": name,
        "measured_on": "a seeded 10 % of TRAIN, held out of every run" if args.validation else "TEST",
        "labels_removed": len(removed),
        "variants": variants,
        "update_documents": summaries["updated"]["update"]
        | {"documents_in_update_corpus": sum(1 for _ in gzip.open(added, "rt"))},
        "seconds": {k: round(v, 2) for k, v in seconds.items()},
        **{f"update_{run}": summaries[run]["update"] for run in variants if run != "updated"},
        **{f"{SECONDS[run]}_over_retrain": round(seconds[SECONDS[run]] / seconds["retrain"], 4) for run in variants},
        "load_1min": load,
        "quality": rows,
        "changed_vs_base": {run: changed_old(tops["base"][0], tops[run][0], gone) for run in runs[1:]},
        "goals": {run: goals(seconds[SECONDS[run]], seconds["retrain"], rows[run], rows["full"]) for run in variants},
    }
    print(json.dumps(facts, indent=2))
    save_result(args.result_name or f"update_{name}", facts)


if __name__ == "__main__":
    main()
