"""Stochastic weight averaging as a hook of the training loop (training/deep/loop.py), for any family that wants it."""

from __future__ import annotations

import torch
from torch import nn
from xtag.training.deep.loop import Callback, TrainingLoop


class SWA(Callback):
    """The running mean of the parameters at each `update`: as a callback, after optimiser step `start`,
    every `every` steps from there and after the budget's last step (never when `start` is None).

    The last step always counts: otherwise a run ending less than `every` steps after an update kept
    averages without its final weights (2 epochs of 178 steps, start 178, every 200: the "trained" model
    was the end of epoch 1, the whole second epoch discarded)."""

    def __init__(self, net: nn.Module, start: int | None = None, every: int = 1):
        self.net, self.count, self.start, self.every = net, 0, start, every
        self.mean: dict[str, torch.Tensor] = {}

    def update(self) -> None:
        self.count += 1
        with torch.no_grad():
            for name, p in self.net.named_parameters():
                if name not in self.mean:
                    self.mean[name] = p.detach().float().clone()
                else:
                    self.mean[name].add_(p.detach().float() - self.mean[name], alpha=1.0 / self.count)

    def swap(self) -> None:
        """Exchange the live parameters and the averages (twice = back to where it was)."""
        if not self.count:
            return
        with torch.no_grad():
            for name, p in self.net.named_parameters():
                live = p.detach().clone()
                p.copy_(self.mean[name])
                self.mean[name] = live.float()

    def on_step(self, loop: TrainingLoop) -> None:
        step = loop.pos.step
        if self.start is None or step < self.start:
            return
        if (step - self.start) % self.every == 0 or step == loop.budget.total:
            self.update()

    def tensors(self) -> dict[str, torch.Tensor]:
        return {**{f"mean.{k}": v for k, v in self.mean.items()}, "count": torch.tensor([self.count])}

    def restore(self, loop: TrainingLoop | None, state: dict, tensors: dict[str, torch.Tensor]) -> None:
        self.count = int(tensors["count"][0]) if "count" in tensors else 0
        self.mean = {k[5:]: v for k, v in tensors.items() if k.startswith("mean.")}
