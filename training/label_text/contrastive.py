"""The label-text encoder, trained contrastively on CPU (issue 49): DEXML's and NGAME's dual-encoder loss.

Each step takes a batch of (document, label) pairs of the training corpus. A document's row of scores runs over
the batch's labels (in-batch negatives) plus labels drawn from its tree shortlist that it does not carry (hard
negatives, NGAME's shortlist mining), at cosine / temperature, under a softmax (InfoNCE) with its own pair as
the target. Its other labels in the batch are masked out, not counted as negatives (DEXML's decoupled
softmax), and so is the label that is the document itself (a package is never its own dependency: its text
would be the easiest match and is no signal).

Both towers start from one random projection, so the first scores are near the features' own cosine (the
untrained baseline) and training moves them from there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import scipy.sparse as sp
import torch
from xtag.models.errors import XtagError
from xtag.models.features.tfidf import TfidfFeaturizer
from xtag.models.inference.label_filter import own_positions
from xtag.models.label_text.encoder import LabelTextEncoder, LabelTextEncoderConfig
from xtag.training.label_text.config import LabelTextConfig


def own_labels(doc_ids: Sequence[str] | None, label_ids: Sequence[str] | None, n_docs: int) -> np.ndarray:
    """For each document, the column of the label that is the document itself (same id), else -1."""
    if doc_ids is None or label_ids is None:
        return np.full(n_docs, -1, dtype=np.int64)
    return own_positions(doc_ids, {label: j for j, label in enumerate(label_ids)})


class Tower(torch.nn.Module):
    """features × W: a sparse row through an EmbeddingBag (sparse gradients), a dense row through a matmul."""

    def __init__(self, init: np.ndarray, sparse: bool):
        super().__init__()
        self.sparse = sparse
        if sparse:
            self.weight = torch.nn.EmbeddingBag(init.shape[0], init.shape[1], mode="sum", sparse=True)
            with torch.no_grad():
                self.weight.weight.copy_(torch.from_numpy(init))
        else:
            self.weight = torch.nn.Parameter(torch.from_numpy(init.copy()))

    def forward(self, rows: sp.csr_matrix | np.ndarray) -> torch.Tensor:
        if self.sparse:
            out = self.weight(
                torch.from_numpy(rows.indices.astype(np.int64)),
                torch.from_numpy(rows.indptr[:-1].astype(np.int64)),
                per_sample_weights=torch.from_numpy(rows.data.astype(np.float32)),
            )
        else:
            out = torch.from_numpy(np.ascontiguousarray(rows, dtype=np.float32)) @ self.weight
        return torch.nn.functional.normalize(out, dim=1)

    def matrix(self) -> np.ndarray:
        w = self.weight.weight if self.sparse else self.weight
        return w.detach().numpy().copy()


def initial_projection(width: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    """A random projection that keeps cosines (Johnson-Lindenstrauss): orthonormal columns when dim ≤ width."""
    if dim <= width:
        q, _ = np.linalg.qr(rng.standard_normal((width, dim)))
        return q.astype(np.float32)
    return (rng.standard_normal((width, dim)) / np.sqrt(dim)).astype(np.float32)


def _hard_negatives(
    docs: np.ndarray, hard: sp.csr_matrix | None, Y: sp.csr_matrix, own: np.ndarray, per_doc: int, rng
) -> np.ndarray:
    """Up to `per_doc` shortlist labels per document, drawn uniformly among those it does not carry and that are
    not itself (vectorised over the batch: a Python loop per document cost as much as the step)."""
    if hard is None or per_doc == 0:
        return np.empty(0, dtype=np.int64)
    H, P = hard[docs], Y[docs]
    rows, cols = np.repeat(np.arange(len(docs)), np.diff(H.indptr)), H.indices.astype(np.int64)
    positive_rows = np.repeat(np.arange(len(docs)), np.diff(P.indptr))
    n = Y.shape[1]
    bad = np.isin(rows * n + cols, positive_rows * n + P.indices) | (cols == own[docs][rows])
    rows, cols = rows[~bad], cols[~bad]
    order = np.lexsort((rng.random(len(rows)), rows))  # each document's candidates in a random order
    rows, cols = rows[order], cols[order]
    rank = np.arange(len(rows)) - np.searchsorted(rows, rows, side="left")
    return cols[rank < per_doc]


def fit_towers(
    Xd: sp.csr_matrix | np.ndarray,
    Xl: sp.csr_matrix | np.ndarray,
    Y: sp.csr_matrix,
    own: np.ndarray,
    config: LabelTextConfig,
    hard: sp.csr_matrix | None = None,
    log: Callable[[dict], None] = lambda e: None,
) -> tuple[np.ndarray, np.ndarray]:
    """(document tower, label tower) trained with the in-batch + hard-negative InfoNCE above; one matrix twice
    when `config.shared`."""
    rng = np.random.default_rng(config.seed)
    torch.manual_seed(config.seed)
    sparse = sp.issparse(Xd)
    init = initial_projection(Xd.shape[1], config.dim, rng)
    doc_tower = Tower(init, sparse)
    label_tower = doc_tower if config.shared else Tower(init, sparse)
    params = list({id(p): p for p in (*doc_tower.parameters(), *label_tower.parameters())}.values())
    optimizer = (torch.optim.SparseAdam if sparse else torch.optim.Adam)(params, lr=config.lr)
    Y = Y.tocsr()
    keep = Y.copy()
    keep.data[:] = 1
    if (own >= 0).any():  # a document's own label is never a positive
        selfs = sp.csr_matrix((np.ones(int((own >= 0).sum())), (np.flatnonzero(own >= 0), own[own >= 0])), Y.shape)
        keep = keep - keep.multiply(selfs)
        keep.eliminate_zeros()
    pair_docs, pair_labels = keep.nonzero()
    if len(pair_docs) == 0:
        raise XtagError("label-text encoder: the training corpus has no (document, label) pair to learn from")
    weights = None
    if config.balance > 0:  # a pair drawn ∝ its label's frequency^-balance: the tail counts more
        weights = np.bincount(pair_labels, minlength=Y.shape[1]).astype(np.float64)[pair_labels] ** -config.balance
        weights /= weights.sum()
    step = 0
    for epoch in range(config.epochs):
        start, total, batches = time.perf_counter(), 0.0, 0
        order = (
            rng.permutation(len(pair_docs))
            if weights is None
            else rng.choice(len(pair_docs), len(pair_docs), p=weights)
        )
        for lo in range(0, len(order), config.batch_size):
            pick = order[lo : lo + config.batch_size]
            if len(pick) < 2:
                continue
            docs, positives = pair_docs[pick], pair_labels[pick]
            negatives = _hard_negatives(np.unique(docs), hard, Y, own, config.hard_negatives, rng)
            cols = np.unique(np.concatenate([positives, negatives]))
            target = np.searchsorted(cols, positives)
            masked = keep[docs][:, cols].toarray() > 0  # the batch's other positives: not negatives
            masked[np.arange(len(docs)), target] = False
            masked |= cols[None, :] == own[docs][:, None]
            D = doc_tower(Xd[docs])
            L = label_tower(Xl[cols])
            scores = (D @ L.T) / config.temperature
            scores = scores.masked_fill(torch.from_numpy(masked), float("-inf"))
            loss = torch.nn.functional.cross_entropy(scores, torch.from_numpy(target))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
            batches += 1
            step += 1
        log(
            {
                "event": "label_text_epoch",
                "epoch": epoch + 1,
                "loss": round(total / max(batches, 1), 4),
                "steps": step,
                "seconds": round(time.perf_counter() - start, 3),
            }
        )
    return doc_tower.matrix(), label_tower.matrix()


def train_label_encoder(
    texts: Sequence[str],
    Y: sp.csr_matrix,
    label_texts: Sequence[str],
    config: LabelTextConfig,
    hard_negatives: sp.csr_matrix | None = None,
    doc_ids: Sequence[str] | None = None,
    label_ids: Sequence[str] | None = None,
    log: Callable[[dict], None] = lambda e: None,
) -> LabelTextEncoder:
    """The encoder of `config.kind` for these training documents (`texts`, their labels `Y`: documents × labels)
    and the labels' texts (`label_texts[j]` of column j). `hard_negatives` (documents × labels, any nonzero is a
    candidate) is the tree's shortlist of each document; `doc_ids` and `label_ids` (the corpus's ids and
    `LabelVocab.names`) let a document that is itself a label be kept from matching its own text."""
    Y = sp.csr_matrix(Y)
    if Y.shape != (len(texts), len(label_texts)):
        raise XtagError(
            f"label-text encoder: labels {Y.shape} do not match {len(texts)} documents × {len(label_texts)} label texts"
        )
    if hard_negatives is not None and hard_negatives.shape != Y.shape:
        raise XtagError(f"label-text encoder: hard negatives {hard_negatives.shape}, expected {Y.shape}")
    start = time.perf_counter()
    texts, label_texts = list(texts), list(label_texts)
    tfidf = static = None
    if config.kind.startswith("tfidf"):
        tfidf, _ = TfidfFeaturizer.fit(texts + label_texts, config.tfidf)
        if config.kind == "tfidf":
            return LabelTextEncoder(LabelTextEncoderConfig(kind="tfidf", dim=tfidf.dim), tfidf=tfidf)
        Xd, Xl = tfidf.transform(texts), tfidf.transform(label_texts)
    else:
        from xtag.training.static.config import StaticDenseConfig
        from xtag.training.static.fit import build_static_encoder

        static = build_static_encoder(texts + label_texts, StaticDenseConfig(source=config.source), log)
        Xd, Xl = static.encode(texts), static.encode(label_texts)
    log({"event": "label_text_features", "kind": config.kind, "seconds": round(time.perf_counter() - start, 3)})
    own = own_labels(doc_ids, label_ids, len(texts))
    hard = None if hard_negatives is None else sp.csr_matrix(hard_negatives)
    doc_tower, label_tower = fit_towers(Xd, Xl, Y, own, config, hard, log)
    towers = {"document": doc_tower} if config.shared else {"document": doc_tower, "label": label_tower}
    settings = LabelTextEncoderConfig(kind=config.kind, dim=config.dim, shared=config.shared)
    return LabelTextEncoder(settings, tfidf=tfidf, static=static, towers=towers)
