#!/usr/bin/env python
"""Featurise a jsonl corpus pair into the sparse matrices the peer runners read.

Run with the project venv (needs scikit-learn, scipy):

    .venv/bin/python bench/peers/make_tfidf_npz.py \
        --train /work/shared/data/debtags/train.jsonl.gz \
        --test  /work/shared/data/debtags/test.jsonl.gz --out DIR

Input lines: {"id", "text", "labels": [...]}. Writes DIR/X_train.npz, Y_train.npz,
X_test.npz, Y_test.npz (CSR float32), labels.json (column order) and prep.json.
Features: TfidfVectorizer(ngram_range=(1,2), sublinear_tf=True, min_df=2,
dtype=float32), fit on train, rows L2-normalised (sklearn default). Labels: the
sorted names of the training labels; test labels unseen in train are dropped
(they can never be predicted, so P@k is unaffected).
"""
import argparse
import gzip
import json
import os
import time

import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction.text import TfidfVectorizer


def read_jsonl(path):
    opener = gzip.open if path.endswith(".gz") else open
    texts, labels = [], []
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                d = json.loads(line)
                texts.append(d["text"])
                labels.append(d.get("labels") or [])
    return texts, labels


def binarise(labels, index):
    rows, cols = [], []
    for i, names in enumerate(labels):
        for j in sorted({index[n] for n in names if n in index}):
            rows.append(i)
            cols.append(j)
    data = np.ones(len(rows), dtype=np.float32)
    return sp.csr_matrix((data, (rows, cols)), shape=(len(labels), len(index)), dtype=np.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True)
    ap.add_argument("--test", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    tr_text, tr_lab = read_jsonl(a.train)
    te_text, te_lab = read_jsonl(a.test)
    names = sorted({n for ls in tr_lab for n in ls})
    index = {n: i for i, n in enumerate(names)}
    t0 = time.perf_counter()
    vec = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2, dtype=np.float32)
    X_tr = vec.fit_transform(tr_text).astype(np.float32).tocsr()
    X_te = vec.transform(te_text).astype(np.float32).tocsr()
    feat_s = time.perf_counter() - t0
    Y_tr, Y_te = binarise(tr_lab, index), binarise(te_lab, index)
    for name, m in (("X_train", X_tr), ("Y_train", Y_tr), ("X_test", X_te), ("Y_test", Y_te)):
        m.sort_indices()
        sp.save_npz(os.path.join(a.out, f"{name}.npz"), m)
    with open(os.path.join(a.out, "labels.json"), "w") as f:
        json.dump(names, f)
    info = {
        "n_train": X_tr.shape[0], "n_test": X_te.shape[0], "n_features": X_tr.shape[1],
        "n_labels": len(names), "features_s": feat_s,
        "test_labels_dropped": int(sum(len(set(ls)) for ls in te_lab) - Y_te.nnz),
    }
    with open(os.path.join(a.out, "prep.json"), "w") as f:
        json.dump(info, f, indent=2)
    print(json.dumps(info))


if __name__ == "__main__":
    main()
