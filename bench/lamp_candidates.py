"""C at serving for a LaMP bundle, chosen on validation texts: quality and in-process speed at each C (issue 42).

    .venv/bin/python -m bench.lamp_candidates --bundle bundles/debtags-lamp-int8 \\
        --val bench/out/lamp_ray/val.jsonl --test /work/shared/data/debtags/test.jsonl.gz

The re-ranker's graph takes any C, and its cost grows with C; a bundle serves a smaller C than it was trained on
with `xtag export --candidates C`. Here the bundle is scored at each C of --grid (at most its own) on the validation
split and on TEST: P@1, P@5, PSP@5 (the evaluation code, XMC convention) and documents per second in this process
(predict_corpus, the service's batch sizes). The chosen C is the smallest whose validation P@1 and PSP@5 are within
--p1-tolerance and --psp-tolerance points of the bundle's own C: a rule on validation alone; TEST is reported, never
used to choose.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from xtag.corpus.files import load_corpus
from xtag.evaluation.evaluate import ground_truth
from xtag.models.bundle.loader import load_bundle
from xtag.models.metrics import evaluate
from xtag.models.tagging.batches import predict_corpus
from xtag.training.lamp.serving_c import choose  # the rule `xtag export` applies on the run's held-out texts

from bench.helpers.results import save_result

METRICS = ("P@1", "P@5", "PSP@5")


def scored(bundle, corpus, C: int) -> dict:
    """The bundle's quality and docs/s on `corpus` when its re-ranker re-scores the first stage's top-C."""
    bundle.predictor.model.reranker.config.candidates = C  # what lamp.json holds after `xtag export --candidates C`
    start = time.perf_counter()
    preds = predict_corpus(bundle, corpus.texts, 5, progress=False)
    seconds = time.perf_counter() - start
    truth = ground_truth(corpus, bundle.predictor.vocab)
    ranked = evaluate(preds.labels, truth.Y, (1, 5), truth.propensity)
    return {**{m: round(float(ranked[m]), 2) for m in METRICS}, "docs_per_s": round(len(corpus.texts) / seconds, 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", type=Path, required=True, help="a LaMP bundle (its own C is the grid's top)")
    ap.add_argument("--val", type=Path, required=True, help="validation texts the bundle was not trained on")
    ap.add_argument("--test", type=Path, required=True)
    ap.add_argument("--grid", default="10,15,20,30", help="the smaller Cs to try, comma-separated")
    ap.add_argument("--p1-tolerance", type=float, default=0.2)
    ap.add_argument("--psp-tolerance", type=float, default=1.0)
    ap.add_argument("--result-name", default="lamp_candidates_debtags")
    args = ap.parse_args()
    bundle = load_bundle(args.bundle)
    full = bundle.predictor.model.reranker.config.candidates
    grid = sorted({int(c) for c in args.grid.split(",") if int(c) < full} | {full})
    rows: dict[str, dict[int, dict]] = {}
    for split, path in (("validation", args.val), ("test", args.test)):
        corpus = load_corpus(path)
        rows[split] = {C: scored(bundle, corpus, C) for C in grid}
        for C, row in rows[split].items():
            print(split, C, row, flush=True)
    chosen = choose(rows["validation"], full, args.p1_tolerance, args.psp_tolerance)
    print("chosen C on validation:", chosen, flush=True)
    result = {
        "bundle": str(args.bundle),
        "trained_candidates": full,
        "tolerances": {"P@1": args.p1_tolerance, "PSP@5": args.psp_tolerance},
        "chosen": chosen,
        "rows": {split: {str(C): row for C, row in by_c.items()} for split, by_c in rows.items()},
    }
    save_result(args.result_name, result)


if __name__ == "__main__":
    main()
