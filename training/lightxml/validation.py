"""LightXML's model selection, the loop's validation hook: held-out split, P@k of the averaged weights, best kept."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
from safetensors.torch import load_model, save_model
from xtag.models.features.onnx_encoder import TextTokenizer
from xtag.models.files.atomic import replacing
from xtag.models.lightxml.model import LightXMLModel, LightXMLOutputs
from xtag.models.metrics import evaluate
from xtag.training.deep.distributed import DistContext
from xtag.training.deep.encoder import run_batched
from xtag.training.deep.loop import Callback, TrainingLoop
from xtag.training.deep.swa import SWA
from xtag.training.lightxml.net import LightXMLNet

EVAL_BATCH = 64


def validation_split(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train rows, held-out validation rows) for model selection; the test set is never seen."""
    perm = np.random.default_rng([seed, 7]).permutation(n)
    n_val = int(round(fraction * n)) if n > 1 else 0
    return np.sort(perm[n_val:]), np.sort(perm[:n_val])


def selection_split(
    n: int, fraction: float, minimum: int, seed: int, log: Callable[[dict], None]
) -> tuple[np.ndarray, np.ndarray]:
    """validation_split, unless it holds out fewer than `minimum` documents: then every document trains and
    nothing is validated, with a warning. (On 2 held-out documents a checkpoint scored P@1 0.0 and was still
    kept as the best: the first validation always is.)"""
    train_rows, val_rows = validation_split(n, fraction, seed)
    if 0 < len(val_rows) < minimum:
        log(
            {
                "event": "warning",
                "message": f"only {len(val_rows)} documents would be held out for model selection (fewer than "
                f"min_val_documents={minimum}): none is held out, and the last (SWA-averaged) weights are kept",
            }
        )
        return np.arange(n), val_rows[:0]
    return train_rows, val_rows


def net_outputs(
    net: LightXMLNet,
    tokenizer: TextTokenizer,
    texts: list[str],
    device: torch.device,
    amp: bool,
    progress: bool = False,
    desc: str = "lightxml",
) -> LightXMLOutputs:
    """Cluster logits and bottleneck vectors of the net in eval mode (no dropout), as the ONNX graph gives."""
    g, h = run_batched(net, tokenizer, texts, EVAL_BATCH, device, amp, progress, desc)
    return LightXMLOutputs(g, h)


class ModelSelection(Callback):
    """Validates every `every` steps, at each epoch's end and at the last step (rank 0); keeps the weights
    (averaged once SWA runs) with the best mean P@1/3/5 in `path`. No validation texts: never validates."""

    def __init__(
        self,
        net: LightXMLNet,
        swa: SWA,
        tokenizer: TextTokenizer,
        texts: list[str],
        Y: sp.csr_matrix,
        model: Callable[[np.ndarray], LightXMLModel],
        every: int,
        path: Path,
        ctx: DistContext,
        amp: bool,
        log: Callable[[dict], None],
    ):
        self.net, self.swa, self.tokenizer, self.texts, self.Y, self.model = net, swa, tokenizer, texts, Y, model
        self.every, self.path, self.ctx, self.amp, self.log = every, path, ctx, amp, log
        self.best: dict | None = None

    def validate(self) -> dict[str, float]:
        """P@1/3/5 of the (SWA-averaged) weights on the held-out split, through the serving prediction rule."""
        self.swa.swap()
        out = net_outputs(self.net, self.tokenizer, self.texts, self.ctx.device, self.amp)
        E = self.net.label_embeddings.weight.detach().float().cpu().numpy().copy()  # not a view: swapped back next
        self.swa.swap()
        m = evaluate(self.model(E).predict(out, k=5).labels, self.Y, (1, 3, 5))
        return {k: round(float(m[k]), 3) for k in ("P@1", "P@3", "P@5")}

    def on_evaluate(self, loop: TrainingLoop) -> None:
        pos, budget = loop.pos, loop.budget
        if len(self.texts) and (pos.step % self.every == 0 or pos.step == budget.total or pos.batch == budget.batches):
            self.select(pos.step, pos.epoch)
            loop.model.train()

    def select(self, step: int, epoch: int) -> None:
        """Validate on rank 0; keep the weights if they beat the best so far (every rank learns the best step)."""
        best = self.best
        if self.ctx.is_main:
            metrics = self.validate()
            score = float(np.mean(list(metrics.values())))
            improved = best is None or score > best["score"]
            self.log(
                {
                    "event": "validate",
                    "step": step,
                    "epoch": epoch,
                    **metrics,
                    "swa_models": self.swa.count,
                    "best": improved,
                }
            )
            if improved:
                self.swa.swap()
                with replacing(self.path) as tmp:
                    save_model(self.net, str(tmp))
                self.swa.swap()
                best = {"step": step, "score": round(score, 3), **metrics}
        self.ctx.barrier()
        if self.ctx.active:
            flag = torch.tensor([best["step"] if best else -1], device=self.ctx.device)
            torch.distributed.broadcast(flag, 0)
            best = best if self.ctx.is_main else ({"step": int(flag[0])} if int(flag[0]) >= 0 else None)
        self.best = best

    def finish(self) -> None:
        """Leave the net with the selected weights; without a validation split, the averages if SWA started,
        else the last weights."""
        if self.best is None:
            self.swa.swap()
        elif self.ctx.is_main:
            load_model(self.net, str(self.path), device=str(self.ctx.device))

    def state(self) -> dict:
        return {"best": self.best}

    def restore(self, loop: TrainingLoop, state: dict, tensors: dict[str, torch.Tensor]) -> None:
        self.best = state["best"]
