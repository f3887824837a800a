"""LaMP's debtags benchmark steps (from lamp_debtags.py), shared by lamp_better, lamp_ray and lamp_fast: splits,
training and export, thresholds, quality."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import numpy as np
from xtag.evaluation.evaluate import ground_truth
from xtag.models.metrics import evaluate, set_metrics
from xtag.models.tagging.batches import predict_corpus
from xtag.training.config import TrainConfig
from xtag.training.export.export_run import export_run
from xtag.training.run import train_run

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
