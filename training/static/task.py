"""tune=task: train the token table end to end with the matcher's loss (Astec / DeepXML's surrogate task).

A text's static vector is the serving one (the encoder's `weight_matrix` row times the table, L2-normalised:
an EmbeddingBag over the same token ids and weights), fed to a linear classifier over the clusters of one
tree level, with BCE, a few epochs of Adam on the shared loop (training/deep/loop.py: seeded epoch order,
progress bar, `step` events, checkpoints a killed run resumes from). Only the table is kept; XR-Linear then
builds its tree and rankers on [TF-IDF ‖ α·tuned static] as for the other tunes.

Deviations from Astec: the table starts from the distilled (or corpus-fitted) one instead of at random, and
only the rows of tokens the training texts use are trained; the others keep the teacher's vectors, so an
unseen synonym still lands near its neighbours in the teacher's geometry. The classifier is discarded
(XR-Linear's rankers replace it), as Astec discards its surrogate head.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn
from xtag.models.features.static_encoder import StaticEncoder
from xtag.training.deep.checkpoint import Checkpoint, seed_all
from xtag.training.deep.config import TransformerConfig
from xtag.training.deep.distributed import DistContext
from xtag.training.deep.loop import Budget, TrainingLoop, epoch_order
from xtag.training.deep.losses import pointwise_loss
from xtag.training.deep.optim import lr_factor
from xtag.training.static.config import StaticDenseConfig
from xtag.training.tree.build import TreeConfig, build_tree, pifa_embeddings


@dataclass
class TaskInputs:
    """What the task needs beside the texts: their TF-IDF rows and labels, and how to build a tree on them."""

    X: sp.csr_matrix
    Y: sp.csr_matrix
    tree: TreeConfig
    threads: int = 0


def matcher_targets(inputs: TaskInputs, max_nodes: int) -> tuple[sp.csr_matrix, str]:
    """(documents × nodes targets, which level) of the classifier the table is trained under.

    The labels themselves when there are at most `max_nodes` (debtags's 595): the finest signal there is, and
    a head that wide is cheap on a CPU. Otherwise the deepest level with at most `max_nodes` clusters of a tree
    built as XR-Linear builds its own (balanced k-means over PIFA) but on the TF-IDF features only: the
    table being tuned must not shape its own targets, and only training labels enter.
    """
    Y = inputs.Y.tocsr()
    if Y.shape[1] <= max_nodes:
        return Y.astype(np.float32), "labels"
    chain = build_tree(pifa_embeddings(inputs.X, Y, inputs.tree.pifa_weighting), inputs.tree, threads=inputs.threads)
    level = max(t for t in range(1, chain.depth + 1) if chain.level_size(t) <= max_nodes)
    return chain.level_targets(Y, level), f"level {level} of {chain.depth}"


class StaticMatcher(nn.Module):
    """The static mean of a text (EmbeddingBag, per-token weights), L2-normalised, then a linear head."""

    def __init__(self, table: np.ndarray, n_nodes: int):
        super().__init__()
        self.bag = nn.EmbeddingBag.from_pretrained(torch.tensor(table, dtype=torch.float32), freeze=False, mode="sum")
        self.head = nn.Linear(table.shape[1], n_nodes)

    def forward(self, ids: torch.Tensor, offsets: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        v = self.bag(ids, offsets, per_sample_weights=weights)
        return self.head(v / v.norm(dim=1, keepdim=True).clamp_min(1e-12))


def _batch(A: sp.csr_matrix, rows: np.ndarray) -> tuple[torch.Tensor, ...]:
    """EmbeddingBag inputs (ids, offsets, weights) of some rows of the weight matrix."""
    part = A[rows]
    return (
        torch.from_numpy(part.indices.astype(np.int64)),
        torch.from_numpy(part.indptr[:-1].astype(np.int64)),
        torch.from_numpy(part.data.astype(np.float32)),
    )


def tune_task(
    encoder: StaticEncoder,
    texts: list[str],
    inputs: TaskInputs,
    config: StaticDenseConfig,
    work: Path | None = None,
    progress: bool = True,
    log: Callable[[dict], None] = lambda e: None,
) -> tuple[np.ndarray, dict]:
    """The encoder's table trained on the task (all rows; untouched where the texts never use a token) and
    facts for the run log. `work` holds the loop's checkpoints (a temporary folder when None)."""
    A = encoder.weight_matrix(texts).tocsr()
    seen = np.flatnonzero(np.bincount(A.indices, minlength=A.shape[1]))
    column = np.full(A.shape[1], -1, dtype=np.int64)
    column[seen] = np.arange(len(seen))
    A = sp.csr_matrix((A.data, column[A.indices], A.indptr), shape=(A.shape[0], len(seen)))
    targets, level = matcher_targets(inputs, config.task_max_nodes)
    seed_all(config.seed)
    net = StaticMatcher(encoder.table[seen], targets.shape[1])
    # Adam moves every coordinate by about lr per step: relative to the table's typical entry, one setting
    # means the same drift for any teacher's scale.
    rms = float(np.sqrt(np.mean(encoder.table[seen].astype(np.float64) ** 2))) if len(seen) else 1.0
    opt = torch.optim.Adam(
        [
            {"params": net.bag.parameters(), "lr": config.task_lr * rms},
            {"params": net.head.parameters(), "lr": config.task_head_lr},
        ]
    )
    tc = TransformerConfig(
        encoder=None,
        epochs=config.task_epochs,
        batch_size=config.task_batch_size,
        max_grad_norm=None,
        device="cpu",
        amp=False,
        seed=config.seed,
    )
    n = A.shape[0]
    budget = Budget.of(n, 1, tc)
    # a killed tune resumes from its last epoch; four step lines per epoch in the run's log
    tc = tc.model_copy(
        update={"checkpoint_every": max(1, budget.per_epoch), "log_every": max(1, budget.per_epoch // 4)}
    )

    def loss(model: nn.Module, rows: np.ndarray) -> tuple[torch.Tensor, float]:
        y = torch.from_numpy(targets[rows].toarray().astype(np.float32))
        value = pointwise_loss(model(*_batch(A, rows)), y, "bce").sum(dim=1).mean()
        return value, float(value.detach())

    @torch.no_grad()
    def full_loss() -> float:
        """Mean per-text loss over every training text (the number the tune lowers)."""
        total = 0.0
        for lo in range(0, n, 4096):
            rows = np.arange(lo, min(lo + 4096, n))
            total += float(loss(net, rows)[0]) * len(rows)
        return total / max(n, 1)

    if work is not None:
        work.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() if work is None else contextlib.nullcontext(work) as folder:
        before = full_loss()
        loop = TrainingLoop(
            net,
            opt,
            budget,
            tc,
            DistContext(0, 1, torch.device("cpu")),
            Checkpoint(Path(folder) / "current"),
            lambda epoch: epoch_order(np.arange(n), [config.seed, epoch], 1),
            lr_lambda=lambda step: lr_factor(step, budget.total, 0, "linear"),
            scope={"tune": "task"},
            name="static task",
            desc="static task",
            progress=progress,
            log=log,
        )
        stats = loop.run(loss)
        after = full_loss()
    table = encoder.table.copy()
    table[seen] = net.bag.weight.detach().numpy()
    facts = {
        "matcher": level,
        "nodes": int(targets.shape[1]),
        "tokens_tuned": int(len(seen)),
        "steps": stats["steps"],
        "loss_before": round(before, 6),
        "loss_after": round(after, 6),
        "train_seconds": stats["seconds"],
    }
    return table, facts
