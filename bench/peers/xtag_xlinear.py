#!/usr/bin/env python
"""xtag's side of bench/xlinear_vs_pecos.py, in processes of their own (the counterpart of pecos_xlinear.py).

    .venv/bin/python -m bench.peers.xtag_xlinear train --workdir DIR [--threads 2] [--save-run RUN --corpus PATH]
    .venv/bin/python -m bench.peers.xtag_xlinear load-bundle BUNDLE

train: reads DIR/X_train.npz and DIR/Y_train.npz (the matrices pecos_xlinear.py reads), trains XR-Linear
(xtag.training.xlinear.train.train_xlinear, XLinearConfig defaults but n_jobs) and writes DIR/xtag_result.json:

    train_s                  train_xlinear's wall time (PIFA + tree + rankers; features come ready-made)
    rss_before_train_mb  peak RSS (VmHWM; see peak_rss_mb) after the imports and the two matrices are loaded
    train_peak_rss_mb    peak RSS right after training: the peak of the whole training process, its input
                         matrices included (pecos_xlinear.py reads its own at the same point)

With --save-run it then writes RUN as `xtag train` would (xtag.training.run.save_model: labels, TF-IDF and
model, from DIR/labels.json and DIR/tfidf; config.json; summary.json), for xtag.training.export.export_run.export_run.

load-bundle: in a fresh interpreter that imports nothing else first, times xtag.models.bundle.loader.load_bundle
(manifest and checksums, TF-IDF, tree, rankers and the engine layout, kernel warm-up) and prints one JSON
line: load_s (load_bundle's own clock), import_and_load_s (including importing xtag.models.bundle.loader) and
peak_rss_mb (the process's peak RSS once the predictor is loaded).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench.helpers.peers import peak_rss_mb

START = time.perf_counter()


def train(args: argparse.Namespace) -> None:
    import numpy as np
    import scipy.sparse as sp
    from xtag.training.xlinear.config import XLinearConfig
    from xtag.training.xlinear.train import XLinearResult, train_xlinear

    X = sp.load_npz(args.workdir / "X_train.npz").tocsr().astype(np.float32)
    Y = sp.load_npz(args.workdir / "Y_train.npz").tocsr().astype(np.float32)
    before = peak_rss_mb()
    config = XLinearConfig(n_jobs=args.threads)
    start = time.perf_counter()
    model = train_xlinear(X, Y, config, progress=False)
    train_s = time.perf_counter() - start
    result = {"train_s": train_s, "train_peak_rss_mb": peak_rss_mb(), "rss_before_train_mb": before}
    print(f"[xtag] trained in {train_s:.3f}s, peak RSS {result['train_peak_rss_mb']:.0f} MB", flush=True)
    if args.save_run:
        import shutil

        from xtag.models.features.tfidf import TfidfFeaturizer
        from xtag.models.labels import LabelVocab
        from xtag.training.config import TrainConfig
        from xtag.training.run import save_model

        shutil.rmtree(args.save_run, ignore_errors=True)
        args.save_run.mkdir(parents=True)
        featurizer = TfidfFeaturizer.load(args.workdir / "tfidf")
        run_config = TrainConfig(corpus=args.corpus, model="xlinear", tfidf=featurizer.config, xlinear=config)
        run_config.save(args.save_run / "config.json")
        vocab = LabelVocab.load(args.workdir / "labels.json")
        trained = XLinearResult(model)
        save_model(args.save_run, vocab, featurizer, trained)
        summary = {"model": "xlinear", "documents": X.shape[0], "labels": len(vocab), **trained.summary()}
        summary["model_seconds"] = round(train_s, 3)
        (args.save_run / "summary.json").write_text(json.dumps(summary, indent=2))
    (args.workdir / "xtag_result.json").write_text(json.dumps(result, indent=2))


def load_bundle(args: argparse.Namespace) -> None:
    from xtag.models.bundle.loader import load_bundle

    bundle = load_bundle(args.bundle)
    total = time.perf_counter() - START
    print(json.dumps({"load_s": bundle.load_seconds, "import_and_load_s": total, "peak_rss_mb": peak_rss_mb()}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train")
    t.add_argument("--workdir", type=Path, required=True)
    t.add_argument("--threads", type=int, default=2)
    t.add_argument("--save-run", type=Path, default=None, help="write a run directory here after training")
    t.add_argument("--corpus", type=Path, default=None, help="the training corpus, for the run's config.json")
    lb = sub.add_parser("load-bundle")
    lb.add_argument("bundle", type=Path)
    args = ap.parse_args()
    if args.command == "train":
        if args.save_run and not args.corpus:
            ap.error("--save-run needs --corpus")
        train(args)
    else:
        load_bundle(args)


if __name__ == "__main__":
    main()
