"""XR-Linear with and without the static token block (issue 24) on debtags: quality, cost and speed, one run.

Usage (from the repository root; tens of minutes on 2 shared cores, most of it training and the teacher):
    .venv/bin/python -m bench.static_debtags [--data ../shared/data/debtags] [--out bench/out/static_debtags]
        [--tunes none corpus task] [--alphas 0.5 1.0] [--tune-texts N] [--task-epochs E --task-lr LR]
        [--source RUN --label ft --skip-baseline]  (a fine-tuned teacher: an xr-transformer run's encoder)
        [--in-text tfidf --label tfidf]  (Astec's TF-IDF weighting of the tokens inside a text)

Per tune (none, corpus) the static encoder is built once from the training file with the teacher (MiniLM-L6,
or --source). α is chosen on a seeded 10 % validation split of the training file (rankers trained on the other
90 %, P@1 then PSP@5 decide), never on the test split; the tune=corpus fit sees the validation texts' teacher
outputs (no labels) because it is fitted on the whole training file. The final model is `train_run` on the
whole training file with the chosen α, its static encoder taken from the one already built (the run's resume
path, so the teacher is not run twice): its training time is the run's plus the encoder's build time.
tune=task trains on labels, so its α is chosen with a table tuned on the 90 % only (a table that saw the
validation labels would favour itself), and the final run distils and tunes its own table on the whole
training file: its training time is the run's.
Latency is in-process `Predictor.predict` of one text (p50 over test texts), throughput is batched prediction
over the whole test split. Writes results-<tunes>.json into --out, and with --result-name also
bench/results/<name>.json (rendered into RESULTS.md by bench/render_results.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

import numpy as np
from xtag.corpus.files import Corpus, build_vocab, load_corpus
from xtag.evaluation.evaluate import evaluate_bundle, ground_truth
from xtag.models.bundle.loader import load_bundle
from xtag.models.features.static_encoder import StaticEncoder
from xtag.models.features.tfidf import TfidfFeaturizer
from xtag.models.metrics import evaluate
from xtag.models.xr_transformer.concat_features import concat_features
from xtag.training.config import TrainConfig
from xtag.training.export.export_run import export_run
from xtag.training.run import train_run
from xtag.training.static.config import StaticDenseConfig
from xtag.training.static.fit import build_static_encoder
from xtag.training.static.task import TaskInputs
from xtag.training.xlinear.config import XLinearConfig
from xtag.training.xlinear.train import train_xlinear

from bench.helpers.results import save_result
from bench.helpers.static import subset

KEYS = ("P@1", "P@3", "P@5", "PSP@5", "macro-R@5")


def choose_alpha(
    encoder: StaticEncoder | None, dense: StaticDenseConfig, train: Corpus, mask: np.ndarray, alphas: list[float]
) -> dict:
    """Validation P@1/PSP@5 of each α (rankers on the fit split's Φ_cat), and the best α. With no `encoder`
    (tune=task) the table is built and tuned on the fit split's texts and labels here."""
    fit, val = subset(train, ~mask), subset(train, mask)
    vocab = build_vocab(fit)
    tfidf, Xf = TfidfFeaturizer.fit(fit.texts)
    Xv = tfidf.transform(val.texts)
    Yf, _ = fit.label_matrix(vocab)
    if encoder is None:
        encoder = build_static_encoder(fit.texts, dense, task=TaskInputs(Xf, Yf, XLinearConfig().tree))
    Ef, Ev = encoder.encode(fit.texts), encoder.encode(val.texts)
    truth = ground_truth(val, vocab)
    scores = {}
    for alpha in alphas:
        model = train_xlinear(concat_features(Xf, Ef, alpha), Yf, XLinearConfig(), progress=False)
        preds = model.predict(concat_features(Xv, Ev, alpha), k=5)
        m = evaluate(preds.labels, truth.Y, (1, 3, 5), truth.propensity)
        scores[str(alpha)] = {k: round(m[k], 2) for k in ("P@1", "PSP@5")}
    best = max(alphas, key=lambda a: (scores[str(a)]["P@1"], scores[str(a)]["PSP@5"]))
    return {"validation": scores, "alpha": best}


def speed(bundle_dir: Path, texts: list[str]) -> dict:
    bundle = load_bundle(bundle_dir)
    p = bundle.predictor
    for t in texts[:50]:
        p.predict([t], k=5)
    times = []
    for t in texts[:1000]:
        start = time.perf_counter()
        p.predict([t], k=5)
        times.append(time.perf_counter() - start)
    start = time.perf_counter()
    for lo in range(0, len(texts), 256):
        p.predict(texts[lo : lo + 256], k=5)
    batch = time.perf_counter() - start
    size = sum(f.stat().st_size for f in bundle_dir.rglob("*") if f.is_file())
    static = bundle_dir / "features" / "static"
    static_size = sum(f.stat().st_size for f in static.rglob("*") if f.is_file()) if static.is_dir() else 0
    return {
        "predict_p50_ms": round(1000 * float(np.median(times)), 3),
        "batch_docs_per_s": round(len(texts) / batch, 1),
        "bundle_mb": round(size / 2**20, 2),
        "static_mb": round(static_size / 2**20, 2),
    }


def interleaved_speed(bundles: dict[str, Path], texts: list[str]) -> dict:
    """p50 of one-text predictions and batched docs/s of every bundle, taking turns text by text (batch by batch),
    so the swings of a shared machine's load hit every bundle alike; ratios between rows come from here."""
    preds = {name: load_bundle(folder).predictor for name, folder in bundles.items()}
    names = list(preds)
    for name in names:
        for t in texts[:50]:
            preds[name].predict([t], k=5)
    times: dict[str, list[float]] = {name: [] for name in names}
    for i, t in enumerate(texts[:1000]):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            start = time.perf_counter()
            preds[name].predict([t], k=5)
            times[name].append(time.perf_counter() - start)
    batch = dict.fromkeys(names, 0.0)
    for _ in range(2):
        for lo in range(0, len(texts), 256):
            for name in names:
                start = time.perf_counter()
                preds[name].predict(texts[lo : lo + 256], k=5)
                batch[name] += time.perf_counter() - start
    return {
        name: {
            "predict_p50_ms": round(1000 * float(np.median(times[name])), 3),
            "batch_docs_per_s": round(2 * len(texts) / batch[name], 1),
        }
        for name in names
    }


def final(name: str, config: TrainConfig, out: Path, test: Corpus, encoder: StaticEncoder | None) -> dict:
    run, bundle = out / f"{name}-run", out / f"{name}-bundle"
    shutil.rmtree(run, ignore_errors=True)
    if encoder is not None:  # the encoder built above, where the run's resume path finds it
        encoder.config.alpha = config.dense.alpha
        encoder.save(run / "checkpoints" / "static")
        config.save(run / "config.json")
    summary = train_run(config, run, resume=encoder is not None, progress=False)
    export_run(run, bundle, overwrite=True)
    metrics, _ = evaluate_bundle(load_bundle(bundle), test, progress=False)
    return {
        **{k: round(metrics[k], 2) for k in KEYS},
        "run_seconds": summary["total_seconds"],
        **speed(bundle, test.texts),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data/debtags"))
    parser.add_argument("--out", type=Path, default=Path("bench/out/static_debtags"))
    parser.add_argument("--tunes", nargs="+", default=["none", "corpus", "task"])
    parser.add_argument("--alphas", nargs="+", type=float, default=[0.5, 1.0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tune-texts", type=int, default=None, help="dense.tune_texts (tune=corpus sample)")
    parser.add_argument("--teacher-max-length", type=int, default=128, help="dense.teacher_max_length")
    parser.add_argument("--task-epochs", type=int, default=None, help="dense.task_epochs")
    parser.add_argument("--task-lr", type=float, default=None, help="dense.task_lr")
    parser.add_argument(
        "--source",
        type=Path,
        default=None,
        help="dense.source: the teacher (default MiniLM), e.g. an xr-transformer run",
    )
    parser.add_argument(
        "--label", default="", help="appended to the static rows' names (e.g. ft for a fine-tuned teacher)"
    )
    parser.add_argument(
        "--in-text", choices=["count", "tfidf"], default="count", help="dense.in_text: a token's weight in a text"
    )
    parser.add_argument("--skip-baseline", action="store_true")
    parser.add_argument("--result-name", default=None, help="also write bench/results/<name>.json")
    parser.add_argument(
        "--speed-only",
        type=Path,
        default=None,
        help="a results file of this script: (re)measure the interleaved "
        "speed of its bundles in --out and write it there, training nothing",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    train_file = args.data / "train.jsonl.gz"
    train, test = load_corpus(train_file), load_corpus(args.data / "test.jsonl.gz")
    if args.speed_only:
        results = json.loads(args.speed_only.read_text())
        bundles = {name: args.out / f"{name}-bundle" for name in results["rows"]}
        results["speed_interleaved"] = interleaved_speed(bundles, test.texts)
        results["speed_load"] = os.getloadavg()
        args.speed_only.write_text(json.dumps(results, indent=2))
        if args.result_name:
            save_result(args.result_name, results, benchmark="static_debtags")
        return
    mask = np.random.default_rng(args.seed).random(len(train)) < 0.1
    results = {
        "command": "bench/static_debtags.py " + " ".join(sys.argv[1:]),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
        "load_start": os.getloadavg(),
        "rows": {},
    }
    path = args.out / ("results-" + "-".join(args.tunes) + (f"-{args.label}" if args.label else "") + ".json")
    if not args.skip_baseline:
        results["rows"]["xlinear"] = final("xlinear", TrainConfig(corpus=train_file), args.out, test, None)
        path.write_text(json.dumps(results, indent=2))
        print(json.dumps(results["rows"]["xlinear"]), flush=True)
    for tune in args.tunes:
        task = {"task_epochs": args.task_epochs, "task_lr": args.task_lr}
        dense = StaticDenseConfig(
            tune=tune,
            tune_texts=args.tune_texts,
            teacher_max_length=args.teacher_max_length,
            in_text=args.in_text,
            **{k: v for k, v in task.items() if v is not None},
            **({"source": args.source.resolve()} if args.source else {}),
        )
        name = f"static-{tune}" + (f"-{args.label}" if args.label else "")
        start = time.perf_counter()
        events: list[dict] = []
        encoder = None if "task" in tune else build_static_encoder(train.texts, dense, events.append)
        build_seconds = time.perf_counter() - start
        chosen = choose_alpha(encoder, dense, train, mask, args.alphas)
        config = TrainConfig(corpus=train_file, dense=dense.model_copy(update={"alpha": chosen["alpha"]}))
        row = final(name, config, args.out, test, encoder)
        row.update(chosen, static_build_seconds=round(build_seconds, 1), static_events=events)
        row["train_seconds"] = round(row["run_seconds"] + build_seconds, 1)
        if encoder is None:  # the run built its own table: its log holds the distil and tune events
            log = args.out / f"{name}-run" / "train_log.jsonl"
            row["static_events"] = [e for e in map(json.loads, log.read_text().splitlines()) if "static" in e["event"]]
        results["rows"][name] = row
        path.write_text(json.dumps(results, indent=2))
        print(json.dumps(row), flush=True)
    results["load_end"] = os.getloadavg()
    bundles = {name: args.out / f"{name}-bundle" for name in results["rows"]}
    results["speed_interleaved"] = interleaved_speed(bundles, test.texts)
    path.write_text(json.dumps(results, indent=2))
    if args.result_name:
        save_result(args.result_name, results, benchmark="static_debtags")


if __name__ == "__main__":
    main()
