"""Choose XR-Linear defaults on a validation split carved from the training set (never the test split).

Usage: python bench/xlinear_validation.py --corpus ../shared/data/debtags/train.jsonl.gz
Prints P@1/P@5/PSP@5/macro-R@5 and training time per variant on a seeded 85/15 split of the training corpus
(also written to bench/results/<--result-name>.json). Metrics follow the XMC convention (models/metrics.py,
training.evaluate.ground_truth), the 85 % fold playing the training split: the label vocabulary and the
propensities come from that fold, and a validation label absent from it is a miss that still counts.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from results import save_result  # bench/ is on sys.path when run as a script

from models.features import TfidfFeaturizer
from models.metrics import evaluate
from training.data import Corpus, build_vocab, load_corpus
from training.evaluate import ground_truth
from training.xlinear.config import XLinearConfig
from training.xlinear.train import train_xlinear

VARIANTS = {
    "default": {},
    "tfn+man(k=2)": {"negatives": "tfn+man", "man_k": 2},
    "tfn+man(k=4)": {"negatives": "tfn+man", "man_k": 4},
    "C=0.5": {"C": 0.5},
    "C=2": {"C": 2.0},
    "logistic": {"loss": "logistic"},
    "threshold=0.05": {"threshold": 0.05},
    "leaf=50": {"tree": {"max_leaf_size": 50}},
    "tol=0.01": {"tol": 0.01},
    "sigmoid": {"post_processor": "sigmoid"},
    "l2-hinge": {"post_processor": "l2-hinge"},
    "leaf=200": {"tree": {"max_leaf_size": 200}},
    "tfn+man(k=1)": {"negatives": "tfn+man", "man_k": 1},
    "leaf=200,tfn+man(k=1)": {"negatives": "tfn+man", "man_k": 1, "tree": {"max_leaf_size": 200}},
}


def subset(corpus: Corpus, keep: np.ndarray) -> Corpus:
    rows = np.flatnonzero(keep)
    return Corpus(
        ids=[corpus.ids[i] for i in rows],
        texts=[corpus.texts[i] for i in rows],
        labels=[corpus.labels[i] for i in rows],
        source=corpus.source,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--variants", default=";".join(VARIANTS), help="';'-separated variant names")
    ap.add_argument(
        "--result-name",
        default=None,
        help="bench/results/<name>.json (default: xlinear_validation_<corpus folder name>)",
    )
    args = ap.parse_args()
    corpus = load_corpus(args.corpus)
    rng = np.random.default_rng(0)
    val = rng.random(len(corpus)) < 0.15
    fit_split, val_split = subset(corpus, ~val), subset(corpus, val)
    train_texts, val_texts = fit_split.texts, val_split.texts
    vocab = build_vocab(fit_split)
    Ytr, _ = fit_split.label_matrix(vocab)
    truth = ground_truth(val_split, vocab)
    featurizer, X = TfidfFeaturizer.fit(train_texts)
    Xval = featurizer.transform(val_texts)
    rows = []
    for name in args.variants.split(";"):
        cfg = XLinearConfig.model_validate(VARIANTS[name])
        start = time.perf_counter()
        model = train_xlinear(X, Ytr, cfg, progress=False)
        seconds = time.perf_counter() - start
        m = evaluate(model.predict(Xval, k=5).labels, truth.Y, (1, 5), truth.propensity, truth.convention)
        rows.append(
            {
                "variant": name,
                "train_s": round(seconds, 2),
                **{k: round(m[k], 2) for k in ("P@1", "P@5", "PSP@5", "macro-R@5")},
            }
        )
        print(json.dumps(rows[-1]), flush=True)
        rows[-1]["config"] = VARIANTS[name]
    save_result(
        args.result_name or f"xlinear_validation_{Path(args.corpus).resolve().parent.name}",
        {
            "validation_fraction": 0.15,
            "seed": 0,
            "documents": [len(train_texts), len(val_texts)],
            "convention": truth.convention,
            "unseen_validation_label_mentions": truth.unseen_mentions,
            "unseen_validation_labels": truth.unseen_labels,
            "variants": rows,
        },
    )


if __name__ == "__main__":
    main()
