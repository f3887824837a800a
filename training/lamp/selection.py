"""LaMP's epoch picked on held-out texts of its own corpus (lamp.val_fraction), never on TEST.

More epochs overfit a small LaMP corpus (debtags, 4,701 texts: 8 epochs fell below the first stage) and the
best count depends on the corpus, so instead of guessing it the trainer can hold some texts out, measure
P@1 of the re-ranked candidates on them after each epoch, and keep the weights of the best epoch. The
learning rate still decays over all lamp.epochs: with selection, lamp.epochs is the most it may train.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn
from xtag.training.deep.loop import Callback, TrainingLoop


def held_out_rows(n: int, fraction: float, seed: int) -> np.ndarray:
    """The held-out rows: a seeded share `fraction` of 0..n-1, sorted (none when it rounds to 0). They neither
    train LaMP nor enter its PIFA label initialisation."""
    return np.sort(np.random.default_rng([seed, 42]).choice(n, int(round(fraction * n)), replace=False))


def p_at_1(logits: torch.Tensor, y: torch.Tensor, valid: torch.Tensor) -> float:
    """Share of rows whose highest-scoring real candidate is a true label (padding never wins)."""
    top = torch.where(valid > 0, logits, torch.full_like(logits, -torch.inf)).argmax(dim=1)
    return float(y.gather(1, top[:, None]).mean())


class EpochSelection(Callback):
    """At each epoch's end (and the budget's last step) `score()` rates the module on the held-out texts; the
    best-scoring weights are kept (ties: the earlier epoch) and `finish` puts them back."""

    def __init__(self, module: nn.Module, score: Callable[[], float], log: Callable[[dict], None]):
        self.module, self.score, self.log = module, score, log
        self.best: dict | None = None
        self.weights: dict[str, torch.Tensor] = {}

    def on_evaluate(self, loop: TrainingLoop) -> None:
        pos, budget = loop.pos, loop.budget
        if pos.batch == budget.batches or pos.step == budget.total:
            self.select(pos.epoch)
            loop.model.train()

    def select(self, epoch: int) -> None:
        was = self.module.training
        self.module.eval()
        with torch.no_grad():
            value = round(100 * self.score(), 3)
        self.module.train(was)
        improved = self.best is None or value > self.best["P@1"]
        self.log({"event": "lamp_validate", "epoch": epoch + 1, "P@1": value, "best": improved})
        if improved:
            self.best = {"epoch": epoch + 1, "P@1": value}
            self.weights = {k: v.detach().clone() for k, v in self.module.state_dict().items()}

    def finish(self) -> dict | None:
        """Load the best epoch's weights (if any epoch was validated); the selected epoch and its P@1."""
        if self.weights:
            self.module.load_state_dict(self.weights)
        return self.best

    def state(self) -> dict:
        return {"lamp_selected": self.best}

    def tensors(self) -> dict[str, torch.Tensor]:
        return {f"selected.{k}": v for k, v in self.weights.items()}

    def restore(self, loop: TrainingLoop, state: dict, tensors: dict[str, torch.Tensor]) -> None:
        self.best = state.get("lamp_selected")
        self.weights = {k[9:]: v for k, v in tensors.items() if k.startswith("selected.")}
