"""LaMP's accuracy knobs on debtags, one change at a time against today's LaMP, chosen on VALIDATION (issue 42).

    .venv/bin/python -m bench.lamp_better --data /work/shared/data/debtags --variants today,init-name,lr-2e-3

The split is bench/lamp_debtags.py's cross-fitted one (seed 0): XR-Linear and LaMP both train on TRAIN minus a
5 % validation part, LaMP on out-of-fold candidates (lamp.cross_fit=5). Today's LaMP is the README's: token
embeddings alone (encoder_layers=0), 64 tokens, 3 epochs, lr 1e-3, C = 50, PIFA label init, no teacher forcing.
Each variant changes one setting of it and is scored with P@1, PSP@5 and macro-F1@5 on the validation part
(which picks) and on TEST (which reports). The first stage's recall on TEST says whether the candidate list
limits: the share of true labels in its top-C, the share of texts with a true label in it (P@1's ceiling), and
the same for the union of the top-C of two XR-Linear trees (tree seeds 0 and 1).

Results accumulate in bench/results/NAME.json, one variant per entry, so variants can run in separate invocations.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from xtag.corpus.files import load_corpus
from xtag.models.bundle.loader import load_bundle
from xtag.models.metrics import evaluate
from xtag.training.config import TrainConfig
from xtag.training.lamp.config import LampConfig

from bench.helpers.lamp import cross_fit_split, scored, train_export
from bench.helpers.results import ROOT, logged_commands, save_result
from bench.helpers.transformer import subset

METRICS = ("P@1", "P@3", "P@5", "PSP@5", "macro-F1@5")
TODAY = {
    "cross_fit": 5,
    "encoder_layers": 0,
    "max_length": 64,
    "epochs": 3,
    "lr": 1e-3,
    "candidates": 50,
    "init": "pifa",
    "teacher_forcing": False,
}
VARIANTS = {
    "today": {},
    "init-name": {"init": "name"},
    "lr-2e-3": {"lr": 2e-3},
    "lr-5e-4": {"lr": 5e-4},
    "epochs-5": {"epochs": 5},
    "epochs-2": {"epochs": 2},
    "c-30": {"candidates": 30},
    "c-100": {"candidates": 100},
    "select-epochs": {"epochs": 6, "val_fraction": 0.05},  # lamp.val_fraction keeps the best of up to 6 epochs
}


def ranked(bundle, corpus) -> dict:
    preds, truth = scored(bundle, corpus)
    got = evaluate(preds.labels, truth.Y, (1, 3, 5), truth.propensity)
    return {m: round(got[m], 2) for m in METRICS}


def first_stage_recall(bundles: list, corpus, sizes: tuple[int, ...]) -> dict:
    """Per C: share of the true labels in the top-C (micro recall) and of texts with one true label in it (P@1's
    ceiling), for the first bundle alone and for the union of every bundle's top-C."""
    truth = scored(bundles[0], corpus)[1]
    Y = truth.Y.tocsr()
    tops = [b.predictor.predict(corpus.texts, k=max(sizes)).labels for b in bundles]
    out = {}
    for C in sizes:
        for name, lists in (("one tree", tops[:1]), ("union of two trees", tops)):
            hits = texts_hit = 0
            widths = []
            for i in range(Y.shape[0]):
                cand = np.unique(np.concatenate([t[i, :C] for t in lists]))
                cand = cand[cand >= 0]
                widths.append(len(cand))
                found = np.isin(Y.indices[Y.indptr[i] : Y.indptr[i + 1]], cand).sum()
                hits, texts_hit = hits + found, texts_hit + (found > 0)
            out[f"{name} C={C}"] = {
                "recall": round(100 * hits / Y.nnz, 2),
                "texts_with_a_true_label": round(100 * texts_hit / Y.shape[0], 2),
                "mean_candidates": round(float(np.mean(widths)), 1),
            }
    return out


def train_variant(name: str, first_bundle: Path, corpus: Path, work: Path) -> tuple[Path, dict, dict]:
    lamp = LampConfig(first_stage=first_bundle, device="cpu", log_every=50, **{**TODAY, **VARIANTS[name]})
    config = TrainConfig(corpus=corpus, model="lamp", lamp=lamp)
    start = time.perf_counter()
    bundle, summary = train_export(config, work / name)
    events = [json.loads(line) for line in (work / name / "run" / "train_log.jsonl").read_text().splitlines()]
    cand = next(e for e in events if e["event"] == "lamp_candidates")
    return bundle, summary, {"candidates": cand, "wall_s": round(time.perf_counter() - start, 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "debtags")
    ap.add_argument("--workdir", type=Path, default=ROOT / "bench" / "out" / "lamp_better")
    ap.add_argument("--variants", default="today", help=f"comma-separated, of: {', '.join(VARIANTS)}")
    ap.add_argument("--recall", action="store_true", help="also measure the first stage's recall@C on TEST")
    ap.add_argument("--result-name", default="lamp_better_debtags")
    args = ap.parse_args()
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    first_path, val_path, first_bundle, first_summary = cross_fit_split(args.data, work)
    val = load_corpus(val_path)
    test = load_corpus(subset(args.data / "test.jsonl.gz", work / "test.jsonl", None))
    out = work / f"{args.result_name}.partial.json"
    result = json.loads(out.read_text()) if out.exists() else {"variants": {}}
    first = load_bundle(first_bundle)
    result["first_stage"] = {"val": ranked(first, val), "test": ranked(first, test)}
    result["split"] = {"train_docs": first_summary["documents"], "val_docs": len(val), "test_docs": len(test)}
    result["today"] = TODAY
    if args.recall:
        seed1 = {"corpus": first_path, "xlinear": {"tree": {"seed": 1}}}
        other, _ = train_export(TrainConfig.model_validate(seed1), work / "xlinear_seed1")
        result["first_stage_recall_test"] = first_stage_recall([first, load_bundle(other)], test, (30, 50, 100))
    commands = logged_commands(work / f"{args.result_name}.commands.json")
    save_result(args.result_name, result, command=commands)  # the first stage and its recall, before any variant
    for name in filter(None, args.variants.split(",")):
        bundle_path, summary, facts = train_variant(name, first_bundle, first_path, work)
        bundle = load_bundle(bundle_path)
        facts["lamp_train_s"] = summary["total_seconds"]
        result["variants"][name] = {"change": VARIANTS[name], "val": ranked(bundle, val), "test": ranked(bundle, test)}
        result["variants"][name].update(facts)
        out.write_text(json.dumps(result, indent=1))
        print(name, json.dumps(result["variants"][name]), flush=True)
        save_result(args.result_name, result, command=commands)  # after each variant: a cut run keeps what it measured


if __name__ == "__main__":
    main()
