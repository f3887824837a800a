"""One tree level's fine-tuning (XR-Transformer eq. 9) with the engineering a long run needs.

AdamW with separate encoder/head learning rates, warm-up + linear/cosine decay, gradient clipping,
AMP on CUDA, gradient accumulation, DDP under torchrun, checkpoints every N optimiser steps that a
killed run resumes from exactly (model, optimiser, schedule, RNG and data position). The pieces
LightXML shares live in training/optim.py and training/checkpoint.py.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from models.onnx_encoder import TextTokenizer
from training.checkpoint import Checkpoint
from training.xr_transformer.config import XRTransformerConfig
from training.distributed import DistContext
from training.optim import Amp, ddp_wrap, decay_groups, lr_factor


@dataclass
class LevelProblem:
    """Level t's objective: targets Y^(t), positive weights R̂^(t), shortlist M^(t) (all n × K_t)."""

    level: int
    Y: sp.csr_matrix
    R: sp.csr_matrix
    M: sp.csr_matrix


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
    """Padded candidates, labels, loss weights (R̂ for positives, α for negatives) and validity."""
    rows = [p.M.indices[p.M.indptr[i]:p.M.indptr[i + 1]] for i in idx]
    m = max(max((len(r) for r in rows), default=1), 1)
    cand = np.zeros((len(idx), m), dtype=np.int64)
    y = np.zeros((len(idx), m), dtype=np.float32)
    weight = np.zeros((len(idx), m), dtype=np.float32)
    for j, (i, r) in enumerate(zip(idx, rows)):
        cand[j, :len(r)] = r
        weight[j, :len(r)] = neg_weight
        pos = p.Y.indices[p.Y.indptr[i]:p.Y.indptr[i + 1]]
        rel = dict(zip(p.R.indices[p.R.indptr[i]:p.R.indptr[i + 1]], p.R.data[p.R.indptr[i]:p.R.indptr[i + 1]]))
        where = np.flatnonzero(np.isin(r, pos))
        y[j, where] = 1.0
        weight[j, where] = [rel.get(r[w], 1.0) for w in where]
    return cand, y, weight


def pointwise_loss(scores: torch.Tensor, y: torch.Tensor, kind: str) -> torch.Tensor:
    if kind == "bce":
        return F.binary_cross_entropy_with_logits(scores, y, reduction="none")
    return F.relu(1.0 - (2.0 * y - 1.0) * scores) ** 2


def make_optimizer(net: XRNet, xc: XRTransformerConfig) -> torch.optim.AdamW:
    return torch.optim.AdamW([*decay_groups(net.encoder, xc.lr_encoder, xc.weight_decay),
                              {"params": [net.weight, net.bias], "lr": xc.lr_head, "weight_decay": 0.0}])


def finetune_level(net: XRNet, problem: LevelProblem, texts: list[str], tokenizer: TextTokenizer,
                   xc: XRTransformerConfig, ctx: DistContext, ckpt: Checkpoint, depth: int,
                   progress: bool = True, log: Callable[[dict], None] = lambda e: None) -> dict:
    """Optimise eq. 9 for `xc.epochs` epochs (or `xc.max_steps` steps), resuming from `ckpt` if it holds this level."""
    t, n = problem.level, len(texts)
    n_batches = -(-(n // ctx.world) // xc.batch_size)
    per_epoch = -(-n_batches // xc.grad_accum)
    total = min(xc.epochs * per_epoch, xc.max_steps or 1 << 62)
    warmup = int(xc.warmup * total)
    opt = make_optimizer(net, xc)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, total, warmup, xc.schedule))
    amp = Amp(xc.amp, ctx.device)
    model = ddp_wrap(net, ctx)
    epoch, start_batch, step, ema = 0, 0, 0, None
    state = ckpt.state()
    if state is not None and state["level"] == t:
        ckpt.restore(net, opt, sched, state, ctx.device)
        epoch, start_batch, step, ema = state["epoch"], state["batch"], state["step"], state["loss_ema"]
        log({"event": "resume", "what": f"fine-tuning level {t}", "step": step})
    model.train()
    bar = tqdm(total=total, initial=step, desc=f"fine-tune level {t}/{depth}", unit="step",
               disable=not (progress and ctx.is_main))
    tick, docs, start = time.perf_counter(), 0, time.perf_counter()
    while step < total and epoch < xc.epochs:
        perm = np.random.default_rng([xc.seed, t, epoch]).permutation(n)
        local = perm[:n - n % ctx.world][ctx.rank::ctx.world]
        batches = [local[lo:lo + xc.batch_size] for lo in range(0, len(local), xc.batch_size)]
        for b in range(start_batch, len(batches)):
            idx = batches[b]
            ids, mask = tokenizer([texts[i] for i in idx])
            cand, y, weight = batch_targets(problem, idx, xc.neg_weight)
            tensors = [torch.from_numpy(a).to(ctx.device) for a in (ids, mask, cand, y, weight)]
            boundary = (b + 1) % xc.grad_accum == 0 or b + 1 == len(batches)
            # DDP all-reduces gradients only on the micro-batch that ends an accumulation.
            with model.no_sync() if ctx.active and not boundary else contextlib.nullcontext():
                with amp.autocast():
                    scores = model(*tensors[:3])
                loss = (pointwise_loss(scores.float(), tensors[3], xc.loss) * tensors[4]).sum() / len(idx)
                amp.scaler.scale(loss / xc.grad_accum).backward()
            docs += len(idx) * ctx.world
            value = float(loss.detach())
            ema = value if ema is None else 0.95 * ema + 0.05 * value
            if not boundary:
                continue
            amp.step(net, opt, xc.max_grad_norm)
            sched.step()
            step += 1
            rate = docs / max(time.perf_counter() - tick, 1e-9)
            bar.set_postfix(loss=f"{ema:.4f}", docs_s=f"{rate:.1f}")
            bar.update(1)
            if ctx.is_main and step % xc.log_every == 0:
                log({"event": "step", "level": t, "epoch": epoch, "step": step, "loss": round(ema, 6),
                     "lr_encoder": sched.get_last_lr()[0], "lr_head": sched.get_last_lr()[2],
                     "docs_per_s": round(rate, 2)})
                tick, docs = time.perf_counter(), 0
            if ctx.is_main and step % xc.checkpoint_every == 0 and step < total:
                ckpt.save(net, opt, sched, {"level": t, "epoch": epoch, "batch": b + 1, "step": step,
                                            "loss_ema": ema})
            if step % xc.checkpoint_every == 0:
                ctx.barrier()
            if step >= total:
                break
        epoch, start_batch = epoch + 1, 0
    bar.close()
    return {"steps": step, "loss": ema, "seconds": round(time.perf_counter() - start, 3)}
