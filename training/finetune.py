"""One tree level's fine-tuning (XR-Transformer eq. 9) with the engineering a long run needs.

AdamW with separate encoder/head learning rates, warm-up + linear/cosine decay, gradient clipping,
AMP on CUDA, gradient accumulation, DDP under torchrun, checkpoints every N optimiser steps that a
killed run resumes from exactly (model, optimiser, schedule, RNG and data position).
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, load_model, save_file, save_model
from torch import nn
from tqdm.auto import tqdm

from models.onnx_encoder import TextTokenizer
from training.config import XRTransformerConfig
from training.distributed import DistContext


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


def lr_factor(step: int, total: int, warmup: int, schedule: str) -> float:
    """Linear warm-up over `warmup` steps, then constant, linear or cosine decay to zero at `total`."""
    if warmup and step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    frac = min(1.0, (step - warmup) / max(1, total - warmup))
    return max(0.0, 1.0 - frac) if schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * frac))


def make_optimizer(net: XRNet, xc: XRTransformerConfig) -> torch.optim.AdamW:
    decay, no_decay = [], []
    for name, param in net.encoder.named_parameters():
        if not param.requires_grad:
            continue
        (no_decay if param.ndim < 2 or "norm" in name.lower() else decay).append(param)
    return torch.optim.AdamW([
        {"params": decay, "lr": xc.lr_encoder, "weight_decay": xc.weight_decay},
        {"params": no_decay, "lr": xc.lr_encoder, "weight_decay": 0.0},
        {"params": [net.weight, net.bias], "lr": xc.lr_head, "weight_decay": 0.0},
    ])


def save_optimizer(opt: torch.optim.Optimizer, folder: Path) -> None:
    """Optimiser state as safetensors (moment tensors) + JSON (groups, scalars): no pickle involved."""
    sd = opt.state_dict()
    tensors, scalars = {}, {}
    for pid, state in sd["state"].items():
        for key, value in state.items():
            (tensors if torch.is_tensor(value) else scalars)[f"{pid}.{key}"] = \
                value.detach().contiguous() if torch.is_tensor(value) else value
    save_file(tensors, str(folder / "optimizer.safetensors"))
    (folder / "optimizer.json").write_text(json.dumps({"param_groups": sd["param_groups"], "scalars": scalars}))


def load_optimizer(opt: torch.optim.Optimizer, folder: Path, device: torch.device) -> None:
    meta = json.loads((folder / "optimizer.json").read_text())
    state: dict[int, dict] = {}
    items = [*load_file(str(folder / "optimizer.safetensors"), device=str(device)).items(), *meta["scalars"].items()]
    for name, value in items:
        pid, key = name.split(".", 1)
        state.setdefault(int(pid), {})[key] = value
    opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})


class Checkpoint:
    """In-progress state of a level in `folder`: swapped in atomically, so a kill never leaves half of one."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.tmp, self.old = folder.with_name(folder.name + ".tmp"), folder.with_name(folder.name + ".old")
        self.source = folder  # where `state` found the newest complete checkpoint

    def save(self, net: XRNet, opt, sched, state: dict) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.tmp.mkdir(parents=True)
        save_model(net, str(self.tmp / "model.safetensors"))
        save_optimizer(opt, self.tmp)
        rng = {"cpu": torch.get_rng_state()}
        if torch.cuda.is_available():
            rng.update({f"cuda{i}": s for i, s in enumerate(torch.cuda.get_rng_state_all())})
        save_file(rng, str(self.tmp / "rng.safetensors"))
        (self.tmp / "state.json").write_text(json.dumps({**state, "scheduler": sched.state_dict()}))
        if self.folder.exists():
            shutil.rmtree(self.old, ignore_errors=True)
            self.folder.rename(self.old)
        self.tmp.rename(self.folder)  # killed before this line: `old` is still complete
        shutil.rmtree(self.old, ignore_errors=True)

    def state(self) -> dict | None:
        for folder in (self.folder, self.old):
            if (folder / "state.json").is_file():
                self.source = folder
                return json.loads((folder / "state.json").read_text())
        return None

    def restore(self, net: XRNet, opt, sched, state: dict, device: torch.device) -> None:
        load_model(net, str(self.source / "model.safetensors"), device=str(device))
        load_optimizer(opt, self.source, device)
        sched.load_state_dict(state["scheduler"])
        rng = load_file(str(self.source / "rng.safetensors"))
        torch.set_rng_state(rng["cpu"])
        if torch.cuda.is_available() and "cuda0" in rng:
            torch.cuda.set_rng_state_all([rng[f"cuda{i}"] for i in range(torch.cuda.device_count())])

    def clear(self) -> None:
        for folder in (self.folder, self.tmp, self.old):
            shutil.rmtree(folder, ignore_errors=True)


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
    use_amp = xc.amp and ctx.device.type == "cuda"
    amp_dtype = torch.bfloat16 if use_amp and torch.cuda.is_bf16_supported() else torch.float16
    scaler = torch.amp.GradScaler("cuda", enabled=use_amp and amp_dtype == torch.float16)
    model = nn.parallel.DistributedDataParallel(net, device_ids=[ctx.device.index] if ctx.device.type == "cuda"
                                                else None) if ctx.active else net
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
                with torch.autocast(ctx.device.type, dtype=amp_dtype, enabled=use_amp):
                    scores = model(*tensors[:3])
                loss = (pointwise_loss(scores.float(), tensors[3], xc.loss) * tensors[4]).sum() / len(idx)
                scaler.scale(loss / xc.grad_accum).backward()
            docs += len(idx) * ctx.world
            value = float(loss.detach())
            ema = value if ema is None else 0.95 * ema + 0.05 * value
            if not boundary:
                continue
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(net.parameters(), xc.max_grad_norm)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
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
