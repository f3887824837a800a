"""One tree level's fine-tuning (XR-Transformer eq. 9): the level's net, targets and loss for the shared loop.

AdamW with separate encoder/head learning rates, warm-up + linear/cosine decay of both; the shared
training loop (training/deep/loop.py) runs the steps: clipping, AMP on CUDA, gradient accumulation, DDP
under torchrun, checkpoints (tagged with the level) that a killed run resumes from exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from torch import nn
from xtag.models.features.onnx_encoder import TextTokenizer
from xtag.training.deep.checkpoint import Checkpoint
from xtag.training.deep.distributed import DistContext
from xtag.training.deep.loop import Budget, TrainingLoop, epoch_order
from xtag.training.deep.losses import pointwise_loss
from xtag.training.deep.optim import decay_groups, lr_factor
from xtag.training.deep.padded_candidates import csr_row, pad_rows
from xtag.training.xr_transformer.config import XRTransformerConfig


@dataclass
class LevelProblem:
    """Level t's objective: targets Y^(t), positive weights R̂^(t), shortlist M^(t) (all n × K_t), and the
    missing-label loss's per-node positive weights (None: plain training; training/weighting/label_weights.py)."""

    level: int
    Y: sp.csr_matrix
    R: sp.csr_matrix
    M: sp.csr_matrix
    pos_weight: np.ndarray | None = None


class XRNet(nn.Module):
    """Encoder + one linear head over the level's nodes, scored only on each text's shortlist."""

    def __init__(self, encoder: nn.Module, W: np.ndarray, b: np.ndarray):
        super().__init__()
        self.encoder = encoder
        self.weight = nn.Parameter(torch.from_numpy(np.ascontiguousarray(W, dtype=np.float32)))
        self.bias = nn.Parameter(torch.from_numpy(np.ascontiguousarray(b, dtype=np.float32)))

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, cand: torch.Tensor) -> torch.Tensor:
        h = self.encoder(ids, mask)
        w = F.embedding(cand, self.weight)
        return torch.einsum("bh,bmh->bm", h.to(w.dtype), w) + self.bias[cand]


def batch_targets(p: LevelProblem, idx: np.ndarray, neg_weight: float) -> tuple[np.ndarray, ...]:
    """Padded candidates, labels and loss weights: R̂ (times the node's missing-label weight) for positives,
    α for negatives, 0 for padding."""
    rows = [csr_row(p.M, i) for i in idx]
    cand, valid, y = pad_rows(rows, [csr_row(p.Y, i) for i in idx])
    weight = valid * np.float32(neg_weight)
    for j, (i, r) in enumerate(zip(idx, rows)):
        rel = dict(zip(csr_row(p.R, i), p.R.data[p.R.indptr[i] : p.R.indptr[i + 1]]))
        where = np.flatnonzero(y[j])
        weight[j, where] = [rel.get(r[w], 1.0) for w in where]
        if p.pos_weight is not None:
            weight[j, where] *= p.pos_weight[r[where]].astype(np.float32)
    return cand, y, weight


def make_optimizer(net: XRNet, xc: XRTransformerConfig) -> torch.optim.AdamW:
    return torch.optim.AdamW(
        [
            *decay_groups(net.encoder, xc.lr_encoder, xc.weight_decay),
            {"params": [net.weight, net.bias], "lr": xc.lr_head, "weight_decay": 0.0},
        ]
    )


def finetune_level(
    net: XRNet,
    problem: LevelProblem,
    texts: list[str],
    tokenizer: TextTokenizer,
    xc: XRTransformerConfig,
    ctx: DistContext,
    ckpt: Checkpoint,
    depth: int,
    progress: bool = True,
    log: Callable[[dict], None] = lambda e: None,
) -> dict:
    """Optimise eq. 9 for `xc.epochs` epochs (or `xc.max_steps` steps), resuming from `ckpt` if it holds this level."""
    t, n = problem.level, len(texts)
    budget = Budget.of(n, ctx.world, xc)
    warmup = int(xc.warmup * budget.total)

    def loss(model: nn.Module, idx: np.ndarray) -> tuple[torch.Tensor, float]:
        ids, mask = tokenizer([texts[i] for i in idx])
        cand, y, weight = batch_targets(problem, idx, xc.neg_weight)
        ids, mask, cand, y, weight = (torch.from_numpy(a).to(ctx.device) for a in (ids, mask, cand, y, weight))
        value = (pointwise_loss(model(ids, mask, cand).float(), y, xc.loss) * weight).sum() / len(idx)
        return value, float(value.detach())

    def lrs(loop: TrainingLoop) -> dict:
        lr = loop.sched.get_last_lr()
        return {"lr_encoder": lr[0], "lr_head": lr[2]}

    loop = TrainingLoop(
        net,
        make_optimizer(net, xc),
        budget,
        xc,
        ctx,
        ckpt,
        order=lambda epoch: epoch_order(np.arange(n), [xc.seed, t, epoch], ctx.world),
        lr_lambda=lambda s: lr_factor(s, budget.total, warmup, xc.schedule),
        scope={"level": t},
        log_fields=lrs,
        name=f"fine-tuning level {t}",
        desc=f"fine-tune level {t}/{depth}",
        progress=progress,
        log=log,
    )
    return loop.run(loss)
