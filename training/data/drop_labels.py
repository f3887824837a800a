"""A missing-labels corpus with known propensities: drop training positives at random (thesis §3.3's protocol).

Each positive (document, label j) of the training split is kept with probability p_j, Jain et al.'s
propensity computed from the *complete* training split's counts (so the true propensities are known
and written beside the corpus), and removed otherwise; the test split is copied untouched, so a model
trained on the dropped split is measured against the complete labels. A training document that
loses all its labels is left out (a tagging corpus has no untagged rows); how many is reported.
"""

from __future__ import annotations

import gzip
import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
from xtag.corpus.files import load_corpus
from xtag.models.errors import XtagError
from xtag.models.propensity import DEFAULT_A, DEFAULT_B, jain_propensities


def drop_labels(
    data: Path, out: Path, seed: int = 0, A: float = DEFAULT_A, B: float = DEFAULT_B, scale: float = 1.0
) -> dict:
    """Write out/train.jsonl.gz (positives dropped), out/test.jsonl.gz (copied), out/propensities.json.

    `scale` multiplies every propensity (capped at 1) for harsher or milder corruption; the propensities
    written are the ones applied. One seeded generator draws per positive in file order, so the same
    training file and seed give the same corpus.
    """
    data, out = Path(data), Path(out)
    train, test = data / "train.jsonl.gz", data / "test.jsonl.gz"
    if not train.is_file() or not test.is_file():
        raise XtagError(f"{data}: needs train.jsonl.gz and test.jsonl.gz")
    if not 0 < scale <= 1:
        raise XtagError(f"propensity scale must lie in (0, 1], got {scale}")
    corpus = load_corpus(train)
    counts = Counter(n for names in corpus.labels for n in set(names))
    names = sorted(counts)
    p = np.minimum(1.0, scale * jain_propensities(np.array([counts[n] for n in names], float), len(corpus), A, B))
    keep_p = dict(zip(names, p))
    rng = np.random.default_rng(seed)
    out.mkdir(parents=True, exist_ok=True)
    kept_docs = dropped_docs = before = after = 0
    labels_left: set[str] = set()
    with gzip.open(out / "train.jsonl.gz", "wt", encoding="utf-8") as fh:
        for doc_id, text, labels in zip(corpus.ids, corpus.texts, corpus.labels):
            labels = list(dict.fromkeys(labels))
            draws = rng.random(len(labels))
            kept = [n for n, u in zip(labels, draws) if u < keep_p[n]]
            before, after = before + len(labels), after + len(kept)
            if not kept:
                dropped_docs += 1
                continue
            kept_docs += 1
            labels_left.update(kept)
            fh.write(json.dumps({"id": doc_id, "text": text, "labels": kept}, ensure_ascii=False) + "\n")
    shutil.copyfile(test, out / "test.jsonl.gz")
    (out / "propensities.json").write_text(json.dumps(keep_p, ensure_ascii=False))
    stats = {
        "rule": f"keep each training positive of label j with probability p_j = jain(n_j, N; A={A}, B={B})"
        + (f" × {scale}" if scale != 1 else "")
        + ", n_j and N from the complete training split; test split untouched",
        "seed": seed,
        "A": A,
        "B": B,
        "scale": scale,
        "train_documents": len(corpus),
        "documents_kept": kept_docs,
        "documents_without_labels_left_out": dropped_docs,
        "positives_before": before,
        "positives_after": after,
        "labels_before": len(names),
        "labels_after": len(labels_left),
        "kept_fraction_of_positives": round(after / before, 4) if before else None,
    }
    (out / "drop_labels.json").write_text(json.dumps(stats, indent=2))
    return stats
