"""LaMP's cross-fitting folds on a local Ray cluster against the local run, on debtags (issue 40).

    .venv/bin/python -m bench.lamp_ray --data /work/shared/data/debtags

The README's LaMP recipe (MiniLM's embeddings alone, lamp.encoder_layers=0, 64 tokens, 3 epochs, CPU) over an
XR-Linear first stage, cross-fitted with lamp.cross_fit=5, twice in one run: once with the folds trained one after
the other here, once with `ray` set to a cluster of two processes on this machine (a head and a worker of 1 CPU
each, started as `ray start` processes by tests/ray_support.py). The split is bench/lamp_debtags.py's cross-fit
split (first stage and LaMP on the same 22,330 texts, 5 % for the threshold). Reported per run: the folds' wall
time and each fold's own time, the whole training time, whether the five folds' candidates are identical across
the two runs, and P@k and the set metrics on the test split.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
from xtag.corpus.files import build_vocab, load_corpus
from xtag.models.bundle.loader import load_bundle
from xtag.training.config import TrainConfig
from xtag.training.lamp.candidates import first_stage_labels
from xtag.training.lamp.config import LampConfig
from xtag.training.lamp.cross_fit import cross_fitted_topk
from xtag.training.run import train_and_export

from bench.helpers.lamp import best_threshold, cross_fit_split, quality, train_export
from bench.helpers.results import ROOT, save_result
from bench.helpers.transformer import subset
from tests.ray_support import local_cluster

FOLDS = 5


def lamp_config(args: argparse.Namespace, corpus: Path, first: Path, ray: str | None) -> TrainConfig:
    lamp = LampConfig(
        first_stage=first,
        cross_fit=FOLDS,
        encoder_layers=0,
        max_length=args.max_length,
        epochs=args.epochs,
        device="cpu",
        log_every=50,
    )
    return TrainConfig(corpus=corpus, model="lamp", lamp=lamp, ray=ray)


def run_lamp(args, corpus: Path, first: Path, ray: str | None, folder: Path) -> dict:
    """Train and export LaMP (folds here, or on `ray`); its folds' and whole training's seconds and load."""
    start_load = os.getloadavg()[0]
    start = time.perf_counter()
    bundle, summary = train_export(lamp_config(args, corpus, first, ray), folder)
    events = [json.loads(line) for line in (folder / "run" / "train_log.jsonl").read_text().splitlines()]
    done = next(e for e in events if e["event"] == "lamp_cross_fit_done")
    return {
        "bundle": bundle,
        "folds_wall_s": done["seconds"],
        "fold_task_s": [e["seconds"] for e in events if e["event"] == "lamp_cross_fit"],
        "train_s": round(summary["total_seconds"], 1),
        "wall_s": round(time.perf_counter() - start, 1),
        "load_average": [round(start_load, 2), round(os.getloadavg()[0], 2)],
    }


def same_candidates(a: Path, b: Path) -> dict:
    """Fold by fold, whether two runs' saved top-C (checkpoints/lamp/folds/K.npz) are identical."""
    out = {}
    for k in range(FOLDS):
        with np.load(a / f"{k}.npz") as x, np.load(b / f"{k}.npz") as y:
            labels = bool(np.array_equal(x["labels"], y["labels"]))
            out[k] = labels and bool(np.allclose(x["scores"], y["scores"], rtol=1e-6, atol=0))
    return out


def fold_inputs(corpus_path: Path, first) -> tuple[list[str], object]:
    """The texts and their labels in the first stage's label space, as train_lamp hands them to the folds."""
    corpus = load_corpus(corpus_path)
    vocab = build_vocab(corpus)
    Y, _ = corpus.label_matrix(vocab)
    return corpus.texts, first_stage_labels(
        Y.tocsr(), vocab.names, first.predictor.vocab.index, len(first.predictor.vocab)
    )[0]


def run_folds(corpus: Path, first_path: Path, ray: str | None, folder: Path) -> dict:
    """The cross-fitting step alone (cross_fitted_topk, as train_lamp calls it): its seconds, and the out-of-fold
    candidates' P@1 and recall@C against the texts' true labels."""
    first = load_bundle(first_path)
    texts, Y = fold_inputs(corpus, first)
    events: list[dict] = []
    start_load, start = os.getloadavg()[0], time.perf_counter()
    labels, _ = cross_fitted_topk(first, texts, Y, 50, FOLDS, 0, folder, train_and_export, False, events.append, ray)
    wall = time.perf_counter() - start
    hits = np.take_along_axis(Y.toarray() > 0, np.maximum(labels, 0), axis=1) & (labels >= 0)
    return {
        "folds_wall_s": round(wall, 1),
        "fold_task_s": [e["seconds"] for e in events if e["event"] == "lamp_cross_fit"],
        "load_average": [round(start_load, 2), round(os.getloadavg()[0], 2)],
        "candidates_P@1": round(100 * float(hits[:, 0].mean()), 2),
        "candidates_recall@50": round(100 * float(hits.sum() / max(Y.nnz, 1)), 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "debtags")
    ap.add_argument("--workdir", type=Path, default=ROOT / "bench" / "out" / "lamp_ray")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--max-length", type=int, default=64)
    ap.add_argument(
        "--folds-only",
        action="store_true",
        help="time the cross-fitting step alone (no LaMP network: its training is the same here and on Ray)",
    )
    ap.add_argument("--result-name", default="lamp_ray_debtags")
    args = ap.parse_args()
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    corpus, val_path, first, first_summary = cross_fit_split(args.data, work)
    runs = {}
    with local_cluster(workers=1, cpus=1) as cluster:
        for name, ray in (("local", None), ("ray", cluster.address)):
            shutil.rmtree(work / name, ignore_errors=True)  # timed afresh, never a finished run reused
            if args.folds_only:
                runs[name] = run_folds(corpus, first, ray, work / name / "run" / "checkpoints" / "lamp" / "folds")
            else:
                runs[name] = run_lamp(args, corpus, first, ray, work / name)
    test = load_corpus(subset(args.data / "test.jsonl.gz", work / "test.jsonl", None))
    if not args.folds_only:
        val = load_corpus(val_path)
        for run in runs.values():
            bundle = load_bundle(run.pop("bundle"))
            run["quality"] = quality(bundle, test, best_threshold(bundle, val)[0])
    folds = [work / name / "run" / "checkpoints" / "lamp" / "folds" for name in runs]
    result = {
        "cluster": "2 processes on this machine: a Ray head and a worker node, 1 CPU each",
        "folds": FOLDS,
        "texts": first_summary["documents"],
        "test_docs": len(test),
        "first_stage_train_s": round(first_summary["total_seconds"], 1),
        "candidates_identical": same_candidates(*folds),
        "runs": runs,
        "config": json.loads(lamp_config(args, corpus, first, None).lamp.model_dump_json()),
    }
    print(json.dumps(result, indent=1), flush=True)
    save_result(args.result_name, result)


if __name__ == "__main__":
    main()
