"""XR-Linear against PECOS (from xlinear_vs_pecos.py and xlinear_seeds.py): the peer's interpreter, metrics,
featurising, shared work folders."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from xtag.corpus.files import build_vocab, load_corpus
from xtag.evaluation.evaluate import ground_truth
from xtag.models.features.tfidf import TfidfConfig, TfidfFeaturizer
from xtag.models.labels import LabelVocab

from bench.helpers.results import ROOT

PECOS_PY = ROOT / "bench" / ".venv-pecos" / "bin" / "python"


PEERS = ROOT / "bench" / "peers"


METRICS = ("P@1", "P@3", "P@5", "PSP@1", "PSP@3", "PSP@5", "nDCG@5", "macro-R@5")


def featurize(args: argparse.Namespace):
    """TF-IDF of both splits, written to the workdir as the matrices both libraries train on (untimed); the label
    vocabulary, the test matrix and the corpus's shape."""
    train, test = load_corpus(args.data / "train.jsonl.gz"), load_corpus(args.data / "test.jsonl.gz")
    vocab = build_vocab(train)
    start = time.perf_counter()
    tfidf = TfidfConfig(ngram_max=args.ngram_max, min_df=args.min_df)
    featurizer, X = TfidfFeaturizer.fit(train.texts, tfidf)
    Xt = featurizer.transform(test.texts)
    print(
        f"TF-IDF: {X.shape[1]} features, {X.nnz / X.shape[0]:.1f} non-zeros per training document, "
        f"{time.perf_counter() - start:.0f} s (not timed for either library)",
        file=sys.stderr,
    )
    Y, Yt = train.label_matrix(vocab)[0], test.label_matrix(vocab)[0]
    for name, M in {"X_train": X, "Y_train": Y, "X_test": Xt, "Y_test": Yt}.items():
        sp.save_npz(args.workdir / f"{name}.npz", M.tocsr().astype(np.float32))
    vocab.save(args.workdir / "labels.json")
    featurizer.save(args.workdir / "tfidf")
    shape = {
        "documents": [X.shape[0], Xt.shape[0]],
        "features": X.shape[1],
        "labels": Y.shape[1],
        "nnz_per_doc": [X.nnz / X.shape[0], Xt.nnz / Xt.shape[0]],
        "labels_per_doc": [Y.nnz / Y.shape[0], Yt.nnz / Yt.shape[0]],
        "tfidf": tfidf.model_dump(),
    }
    return vocab, Xt.tocsr().astype(np.float32), shape  # the training processes load the matrices themselves


def workdir_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of the accuracy-over-seeds benchmarks that reread bench/xlinear_vs_pecos.py's matrices."""
    ap.add_argument("--workdir", type=Path, required=True, help="a bench/xlinear_vs_pecos.py workdir")
    ap.add_argument("--data", type=Path, required=True, help="the corpus folder (its test split is the truth)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--threads", type=int, default=2)


def load_workdir(w: Path, data: Path) -> tuple:
    """X_train, Y_train and X_test as both libraries read them, and the test split's truth."""
    X, Y = (sp.load_npz(w / f"{m}.npz").tocsr().astype(np.float32) for m in ("X_train", "Y_train"))
    Xt = sp.load_npz(w / "X_test.npz").tocsr().astype(np.float32)
    return X, Y, Xt, ground_truth(load_corpus(data / "test.jsonl.gz"), LabelVocab.load(w / "labels.json"))
