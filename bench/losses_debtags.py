"""Missing-label training losses on debtags (issue 16): plain vs propensity vs unbiased-balanced XR-Linear.

Usage (from the repository root; one run, several minutes on 2 cores, nearly all of it training):
    .venv/bin/python -m bench.losses_debtags [--data ../shared/data/debtags] [--out bench/out/losses_debtags]

Two training sets, one test split (always the complete test labels):
- ``complete``: debtags TRAIN as it is;
- ``drop-labels``: TRAIN with each positive of label j kept with probability p_j (Jain et al., A=0.55,
  B=1.5, from the complete TRAIN counts; training/data/drop_labels.py, seed --drop-seed), documents left
  without labels removed. On it the weighted losses train twice: with propensities from the formula on
  the observed counts (what a user without ground truth does) and with the true p_j used to drop.
Every model: XR-Linear defaults (training/xlinear/config.py) except the loss; missing-label settings
at their defaults (β = 0.99, chosen on a validation split of TRAIN, never on test). Metrics follow
the XMC convention against the test split: P@1/3/5, PSP@1/3/5 (propensities from the model's own
training counts, as `xtag evaluate`), macro-R@5, coverage@5; training time is the rankers' fit.

Then the best weighted loss on ``complete`` (highest macro-R@5 with P@5 within one point of plain)
and plain training are each combined with per-request reweighting (models/inference/reweighting.py, on the raw
beam scores, candidates widened as the service does), to see whether the training-time fix adds to
the prediction-time one. Writes bench/results/<--result-name>.json (default losses_debtags).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from xtag.corpus.files import build_vocab, load_corpus
from xtag.evaluation.evaluate import ground_truth
from xtag.models.features.tfidf import TfidfFeaturizer
from xtag.models.inference.reweighting import candidate_budget, gains_for, label_weights, rerank
from xtag.models.metrics import evaluate
from xtag.training.data.drop_labels import drop_labels
from xtag.training.weighting.label_weights import MissingLabelsConfig
from xtag.training.xlinear.config import XLinearConfig
from xtag.training.xlinear.train import train_xlinear

from bench.helpers.results import save_result

K = 5
KEYS = ("P@1", "P@3", "P@5", "PSP@1", "PSP@3", "PSP@5", "macro-R@5", "coverage@5")
LOSSES = ("squared-hinge", "propensity", "unbiased-balanced")
REWEIGHT = (("psp", 0.5), ("psp", 1.0), ("macro-recall", 0.5), ("macro-recall", 1.0))


def metrics(pred: np.ndarray, truth) -> dict:
    m = evaluate(pred, truth.Y, (1, 3, 5), truth.propensity, truth.convention)
    return {k: round(float(m[k]), 2) for k in KEYS}


def run_corpus(name: str, train_path: Path, test_path: Path, variants: list[tuple[str, dict]], rw: dict) -> dict:
    """Train each variant on `train_path`, evaluate on the complete test split; keep the models for `rw`."""
    corpus, test = load_corpus(train_path), load_corpus(test_path)
    vocab = build_vocab(corpus)
    Y, _ = corpus.label_matrix(vocab)
    truth = ground_truth(test, vocab)
    featurizer, X = TfidfFeaturizer.fit(corpus.texts)
    Xt = featurizer.transform(test.texts)
    rows = []
    for label, cfg in variants:
        config, missing = XLinearConfig(), MissingLabelsConfig.model_validate(cfg)
        missing.bind_labels(vocab.names)
        start = time.perf_counter()
        model = train_xlinear(X, Y, config, progress=False, missing_labels=missing)
        seconds = time.perf_counter() - start
        row = {
            "variant": label,
            "loss": missing.weighting if missing.weighting != "none" else config.loss,
            "train_s": round(seconds, 1),
            **metrics(model.predict(Xt, K).labels, truth),
        }
        if missing.propensity_file:
            row["propensities"] = "true (drop-labels file)"
        elif missing.weighting != "none":
            row["propensities"] = "formula on observed counts"
        print(json.dumps({"corpus": name, **row}), flush=True)
        rows.append(row)
        rw.setdefault(name, {})[label] = (model, Xt, truth, vocab)
    return {
        "train_documents": len(corpus),
        "labels": len(vocab),
        "test_documents": len(test),
        "unseen_test_label_mentions": truth.unseen_mentions,
        "convention": truth.convention,
        "rows": rows,
    }


def reweighting_table(models: dict, best: str) -> list[dict]:
    """Plain and `best`, each alone and with per-request reweighting (scheme, α)."""
    rows = []
    for label in ("plain", best):
        model, Xt, truth, vocab = models[label]
        rows.append({"training": label, "reweighting": "none", **metrics(model.predict(Xt, K).labels, truth)})
        k_cand, beam = candidate_budget(K, model.config.beam_size, vocab.frequency_array.size)
        wide = model.predict(Xt, k_cand, beam)
        for scheme, alpha in REWEIGHT:
            w = label_weights(vocab.frequency_array, vocab.n_train_docs, scheme)
            pred = rerank(wide, gains_for(w, alpha), K)[0].labels
            rows.append({"training": label, "reweighting": f"{scheme} α={alpha:g}", **metrics(pred, truth)})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=Path("../shared/data/debtags"))
    ap.add_argument("--out", type=Path, default=Path("bench/out/losses_debtags"))
    ap.add_argument("--drop-seed", type=int, default=0)
    ap.add_argument("--result-name", default="losses_debtags")
    args = ap.parse_args()
    dropped = args.out / f"drop-labels-seed{args.drop_seed}"
    drop = drop_labels(args.data, dropped, seed=args.drop_seed)
    print(json.dumps(drop), flush=True)
    plain = [("plain", {})] + [(loss, {"weighting": loss}) for loss in LOSSES[1:]]
    true_p = [
        (f"{loss} (true p)", {"weighting": loss, "propensity_file": str(dropped / "propensities.json")})
        for loss in LOSSES[1:]
    ]
    models: dict = {}
    result = {
        "model": "XR-Linear, defaults except the loss",
        "missing_labels_defaults": MissingLabelsConfig().model_dump(mode="json", exclude={"weighting"}),
        "complete": run_corpus("complete", args.data / "train.jsonl.gz", args.data / "test.jsonl.gz", plain, models),
        "drop_labels": {
            "drop": drop,
            **run_corpus(
                "drop-labels", dropped / "train.jsonl.gz", args.data / "test.jsonl.gz", plain + true_p, models
            ),
        },
    }
    base = result["complete"]["rows"][0]
    within = [r for r in result["complete"]["rows"][1:] if r["P@5"] >= base["P@5"] - 1.0]
    best = max(within, key=lambda r: r["macro-R@5"])["variant"] if within else "unbiased-balanced"
    result["reweighting"] = {"best": best, "rows": reweighting_table(models["complete"], best)}
    save_result(args.result_name, result, benchmark="losses_debtags")


if __name__ == "__main__":
    main()
