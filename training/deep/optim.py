"""Optimisation pieces of the shared training loop (training/deep/loop.py): AdamW groups, LR schedule, AMP, DDP wrap."""

from __future__ import annotations

import math

import torch
from torch import nn
from xtag.training.deep.distributed import DistContext


def decay_groups(module: nn.Module, lr: float, weight_decay: float) -> list[dict]:
    """AdamW groups: weight decay on matrices, none on biases and LayerNorm weights (BERT's convention)."""
    decay, no_decay = [], []
    for name, param in module.named_parameters():
        if not param.requires_grad:
            continue
        (no_decay if param.ndim < 2 or "norm" in name.lower() else decay).append(param)
    return [
        {"params": decay, "lr": lr, "weight_decay": weight_decay},
        {"params": no_decay, "lr": lr, "weight_decay": 0.0},
    ]


def lr_factor(step: int, total: int, warmup: int, schedule: str) -> float:
    """Linear warm-up over `warmup` steps, then constant, linear or cosine decay to zero at `total`."""
    if warmup and step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    frac = min(1.0, (step - warmup) / max(1, total - warmup))
    return max(0.0, 1.0 - frac) if schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * frac))


class Amp:
    """Mixed precision on CUDA only: bf16 where supported, else fp16 with a gradient scaler."""

    def __init__(self, enabled: bool, device: torch.device):
        self.enabled = enabled and device.type == "cuda"
        self.device_type = device.type
        self.dtype = torch.bfloat16 if self.enabled and torch.cuda.is_bf16_supported() else torch.float16
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.enabled and self.dtype == torch.float16)

    def autocast(self):
        return torch.autocast(self.device_type, dtype=self.dtype, enabled=self.enabled)

    def step(self, net: nn.Module, opt: torch.optim.Optimizer, max_grad_norm: float | None) -> None:
        """Unscale, clip (when `max_grad_norm`), step, update the scale, zero the gradients."""
        self.scaler.unscale_(opt)
        if max_grad_norm:
            torch.nn.utils.clip_grad_norm_(net.parameters(), max_grad_norm)
        self.scaler.step(opt)
        self.scaler.update()
        opt.zero_grad(set_to_none=True)


def ddp_wrap(net: nn.Module, ctx: DistContext, find_unused: bool = False) -> nn.Module:
    """The module to call in the training loop: DDP under torchrun, the bare net otherwise."""
    if not ctx.active:
        return net
    return nn.parallel.DistributedDataParallel(
        net, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None, find_unused_parameters=find_unused
    )
