"""The label-text stage on debdeps (issue 49): XR-Linear against XR-Linear with the stage (the trained encoder, and
the untrained TF-IDF cosine encoder as the baseline row), and LaMP re-ranking the stage's fused shortlist (its label
embeddings started as today, or from the label texts: lamp.init=text), trained, evaluated and served in one run.

    .venv/bin/python -m bench.label_text_stage --data ../shared/data/debdeps --out label_text_stage

Per variant: training wall time (`train_run`), P@1, P@5, nDCG@5, PSP@5, macro-R@5 and the test-only labels' recall@10
(the occurrences of test labels no training document carries, found in the full top 10), every figure with each
document's own id excluded from its predictions (models/inference/label_filter.py `self_filters`, as `xtag evaluate --exclude-self`); then HTTP /v1/predict p50 (one text a request,
one connection) and /v1/predict/batch docs/s (64 texts a request), the variants' servers taking turns.

A variant whose folder under --work holds a bundle is not trained again. A LaMP variant re-ranks the bundle of the
variant it names in FIRST_STAGE (listed before it in --variants); its run reads no label file of its own (the first
stage's bundle keeps the texts), and its training time includes the cross-fitting folds (`cross_fit_seconds`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
from xtag.corpus.files import load_corpus
from xtag.evaluation.evaluate import ground_truth
from xtag.models.bundle.loader import load_bundle
from xtag.models.inference.label_filter import self_filters
from xtag.models.metrics import evaluate, occurrence_recall
from xtag.models.tagging.batches import predict_corpus
from xtag.training.config import TrainConfig
from xtag.training.export.export_run import export_run
from xtag.training.run import train_run

from bench.helpers.results import save_result
from bench.helpers.server import free_port, ms, start_server, timed

VARIANTS = {  # name -> the TrainConfig fields beyond the corpus
    "xlinear": {},
    "xlinear+stage (tfidf cosine)": {"label_text": {"encoder": {"kind": "tfidf"}}},
    "xlinear+stage (tfidf-linear)": {"label_text": {"encoder": {"kind": "tfidf-linear"}}},
}
# LaMP's debdeps settings (bench/RESULTS.md, lamp_debdeps_cf5: no contextual layer, no teacher forcing, 5 folds)
LAMP = {"encoder_layers": 0, "teacher_forcing": False, "epochs": 3, "lr": 2e-3, "cross_fit": 5, "device": "cpu"}
VARIANTS["xlinear+stage+lamp"] = {"model": "lamp", "lamp": LAMP}
VARIANTS["xlinear+stage+lamp (label init from text)"] = {"model": "lamp", "lamp": {**LAMP, "init": "text"}}
FIRST_STAGE = {name: "xlinear+stage (tfidf cosine)" for name in VARIANTS if name.startswith("xlinear+stage+lamp")}


def folder_of(work: Path, name: str) -> Path:
    return work / name.replace(" ", "_").replace("+", "_").replace("(", "").replace(")", "")


def train_config(data: Path, work: Path, name: str) -> TrainConfig:
    """The variant's TrainConfig: the label file for the stage's variants; a LaMP variant's first stage is the
    bundle of the variant it re-ranks."""
    settings = {"corpus": data / "train.jsonl.gz", **VARIANTS[name]}
    if name in FIRST_STAGE:
        first = folder_of(work, FIRST_STAGE[name]) / "bundle"
        if not first.is_dir():
            raise SystemExit(f"{name}: its first stage {FIRST_STAGE[name]!r} has no bundle in {work}; list it first")
        settings["lamp"] = {**settings["lamp"], "first_stage": first}
    elif name != "xlinear":
        settings["labels"] = data / "labels.jsonl.gz"
    return TrainConfig(**settings)


def cross_fit_seconds(run: Path) -> float | None:
    """A LaMP run's cross-fitting wall time (its first-stage copies), from its log; None when it trained none."""
    events = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    done = [e["seconds"] for e in events if e["event"] == "lamp_cross_fit_done"]
    return sum(done) if done else None


def fold_cost(work: Path, name: str, train_seconds: float) -> dict:
    """A LaMP variant's training cost with its folds: its own, or (folds taken from another variant, `reuse_folds`)
    that variant's fold seconds added to its train_seconds."""
    own = cross_fit_seconds(folder_of(work, name) / "run")
    if own is not None:
        return {"cross_fit_seconds": own}
    for donor in FIRST_STAGE:
        run = folder_of(work, donor) / "run"
        if donor != name and FIRST_STAGE[donor] == FIRST_STAGE[name] and (run / "train_log.jsonl").is_file():
            if (seconds := cross_fit_seconds(run)) is not None:
                return {
                    "cross_fit_seconds": seconds,
                    "cross_fit_reused_from": donor,
                    "train_seconds": train_seconds + seconds,
                }
    return {}


def reuse_folds(work: Path, name: str, config: TrainConfig) -> str | None:
    """A LaMP variant not trained yet whose first stage an earlier LaMP variant re-ranked starts as a resumed run
    holding that one's cross-fitting folds (folds/K.npz, which a resumed run reuses: training/lamp/cross_fit.py). Same
    first stage, seed, folds and C, so the same candidates; the K first-stage copies are not trained twice
    (`fold_cost` counts them in). Returns the variant whose folds it took."""
    run = folder_of(work, name) / "run"
    if name not in FIRST_STAGE or run.exists():
        return None
    k = config.lamp.cross_fit
    for donor in FIRST_STAGE:
        folds = folder_of(work, donor) / "run" / "checkpoints" / "lamp" / "folds"
        if donor == name or FIRST_STAGE[donor] != FIRST_STAGE[name] or VARIANTS[donor]["lamp"]["cross_fit"] != k:
            continue
        if k and all((folds / f"{i}.npz").is_file() for i in range(k)):
            (run / "checkpoints" / "lamp").mkdir(parents=True)
            shutil.copytree(folds, run / "checkpoints" / "lamp" / "folds", ignore=shutil.ignore_patterns("fold*"))
            shutil.copyfile(folds.parents[2] / "corpus.json", run / "corpus.json")  # the corpus fingerprint
            (run / "config.json").write_text(config.model_dump_json(indent=2))
            return donor
    return None


def quality(bundle_path: Path, test, train_names: set[str]) -> dict:
    bundle = load_bundle(bundle_path)
    vocab = bundle.predictor.vocab
    start = time.perf_counter()
    preds = predict_corpus(bundle, test.texts, 10, progress=False, filters=self_filters(test.ids, vocab))
    seconds = time.perf_counter() - start
    truth = ground_truth(test, vocab)
    metrics = evaluate(preds.labels[:, :5], truth.Y, (1, 5), truth.propensity)
    new = np.array([j for j, name in enumerate(truth.names) if name not in train_names], dtype=np.int64)
    total = int(truth.Y[:, new].sum()) if len(new) else 0
    picked = {m: metrics[m] for m in ("P@1", "P@5", "nDCG@5", "PSP@5", "macro-R@5")}
    return {
        **picked,
        "test_only_recall@10": occurrence_recall(preds.labels, truth.Y, new, 10),
        "test_only_occurrences": total,
        "evaluate_seconds": seconds,
    }


def serve_rounds(bundles: dict[str, Path], texts: list[str], requests: int, rounds: int) -> dict:
    """p50 of single-text /v1/predict and docs/s of 64-text batches, each server in turn per round."""
    single = [json.dumps({"text": t, "k": 5}).encode() for t in texts[:requests]]
    batches = [
        json.dumps({"documents": [{"text": t} for t in texts[lo : lo + 64]], "k": 5}).encode()
        for lo in range(0, min(len(texts), requests * 4), 64)
    ]
    out = {name: {"p50_ms": [], "batch_docs_s": []} for name in bundles}
    servers = {}
    try:
        for name, bundle in bundles.items():
            port = free_port()
            servers[name] = (start_server(bundle, port, "on"), port)
        for _ in range(rounds):
            for name, (_, port) in servers.items():
                times = asyncio.run(timed(port, "/v1/predict", single))
                out[name]["p50_ms"].append(ms(times, 50))
                start = time.perf_counter()
                asyncio.run(timed(port, "/v1/predict/batch", batches))
                docs = sum(len(json.loads(b)["documents"]) for b in batches)
                out[name]["batch_docs_s"].append(docs / (time.perf_counter() - start))
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait()
    return {name: {k: float(np.median(v)) for k, v in r.items()} for name, r in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", type=Path, default=Path("../shared/data/debdeps"))
    ap.add_argument("--work", type=Path, default=Path("/tmp/label_text_stage"))
    ap.add_argument("--out", default="label_text_stage")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    test = load_corpus(args.data / "test.jsonl.gz")
    train_names = {n for labels in load_corpus(args.data / "train.jsonl.gz").labels for n in labels}
    rows, bundles = {}, {}
    for name in args.variants.split(","):
        folder = folder_of(args.work, name)
        config = train_config(args.data, args.work, name)
        reuse_folds(args.work, name, config)
        load = os.getloadavg()[0]
        start = time.perf_counter()
        if not (folder / "bundle").is_dir():  # a run left without its bundle resumes from its checkpoints
            train_run(config, folder / "run", resume=(folder / "run" / "config.json").is_file(), progress=False)
            export_run(folder / "run", folder / "bundle")
        summary = json.loads((folder / "run" / "summary.json").read_text())
        rows[name] = {"train_seconds": summary["train_seconds"], "load_at_start": load}
        if name in FIRST_STAGE:
            rows[name].update(fold_cost(args.work, name, summary["train_seconds"]))
            if FIRST_STAGE[name] in rows:  # the whole stack's training: the first stage's, then LaMP's with its folds
                rows[name]["stack_train_seconds"] = (
                    rows[FIRST_STAGE[name]]["train_seconds"] + rows[name]["train_seconds"]
                )
        rows[name].update(quality(folder / "bundle", test, train_names))
        rows[name]["wall_seconds"] = time.perf_counter() - start
        bundles[name] = folder / "bundle"
        print(name, json.dumps(rows[name]), flush=True)
    served = serve_rounds(bundles, test.texts, args.requests, args.rounds)
    for name, figures in served.items():
        rows[name].update(figures)
    print(json.dumps(served), flush=True)
    save_result(args.out, {"data": str(args.data), "variants": rows, "rounds": args.rounds})


if __name__ == "__main__":
    main()
