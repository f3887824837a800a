"""LightXML (Jiang et al. 2021, Algorithm 1): one transformer trained end to end with dynamic negatives.

Each step: e = last-N [CLS] vectors (dropout 0.5); the generator scores all clusters (L_g, eq. 1);
the discriminator scores the labels of the generator's current top-b clusters plus the true
clusters (eq. 2-4, L_d eq. 5); L = L_g + L_d (eq. 6); with one label per cluster the generator alone
(L = L_g) unless `flat_discriminator`. Negatives are the model's own top clusters,
re-drawn every step. `negatives="static"` is the Table 5 ablation: the generator trains alone for
`static_warmup` of the steps, then each document's top-b clusters are fixed once and L_g + L_d
trains on them. AdamW, encoder at 1e-4 (constant unless `warmup` / `schedule`), AMP on CUDA, SWA from
`swa_start` every `swa_every`
steps (validations and the saved model use the averages), gradient accumulation, DDP under
torchrun, checkpoints + resume, model selection on a held-out validation split.

Deviations from the paper, all for this project's budgets: MiniLM-L6 by default instead of
BERT-base; the heads at 10 × the encoder's rate (`lr_head`; the paper has one rate); the generator's
biases start at the clusters' log prior odds (`prior_bias`); `max_steps` caps training on CPU (SWA starts from a fractional epoch then); losses are
by default means over clusters / valid candidates (as the authors' code does; `reduction="sum"`: eq. 1/5);
the selection metric is the mean of P@1/3/5 on the validation split.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
from xtag.models.errors import XtagError, reading
from xtag.models.families import TrainInputs
from xtag.models.features.onnx_encoder import TextTokenizer
from xtag.models.files import index_bounds
from xtag.models.files.atomic import write_atomic
from xtag.models.label_tree import ClusterChain
from xtag.models.lightxml.model import LightXMLHeadConfig, LightXMLModel, cluster_members
from xtag.training.deep.checkpoint import Checkpoint, fit_or_reload
from xtag.training.deep.distributed import DistContext
from xtag.training.deep.encoder import TextEncoder
from xtag.training.deep.loop import Budget, Callback, TrainingLoop, epoch_order, start_tree_run
from xtag.training.deep.losses import LabelWeightTable, weighted_pointwise_loss
from xtag.training.deep.optim import decay_groups, lr_factor
from xtag.training.deep.padded_candidates import csr_row
from xtag.training.deep.result import NetRunResult, finish_run
from xtag.training.deep.swa import SWA
from xtag.training.lightxml.clusters import label_clusters, training_candidates
from xtag.training.lightxml.config import LightXMLConfig
from xtag.training.lightxml.net import LightXMLNet
from xtag.training.lightxml.result import LIGHTXML_NET
from xtag.training.lightxml.validation import ModelSelection, net_outputs, selection_split
from xtag.training.weighting.label_weights import head_label_weights, node_weights


class Trainer(Callback):
    """State of one LightXML run: Algorithm 1's loss for the shared loop (training/deep/loop.py), which `fit` runs
    (resumable) with SWA, model selection and, as this object's own callback, the switch to static negatives."""

    def __init__(
        self,
        net: LightXMLNet,
        chain: ClusterChain,
        texts: list[str],
        Y: sp.csr_matrix,
        tokenizer: TextTokenizer,
        lc: LightXMLConfig,
        ctx: DistContext,
        folder: Path,
        progress: bool,
        log: Callable[[dict], None],
        label_weights: np.ndarray | None = None,
    ):
        self.net, self.chain, self.texts, self.tokenizer, self.lc, self.ctx = net, chain, texts, tokenizer, lc, ctx
        self.folder, self.progress, self.log = folder, progress, log
        self.Y, self.Yc = Y.tocsr(), chain.level_targets(Y, 1)
        self.train_idx, val_idx = selection_split(len(texts), lc.val_fraction, lc.min_val_documents, lc.seed, log)
        self.members = cluster_members(chain)
        # Missing-label loss (training/weighting/label_weights.py): positives of label j weigh u_j in L_d, positives of
        # a cluster its labels' occurrence-weighted mean in L_g (node_weights); None: plain BCE.
        freq = np.asarray((self.Y != 0).sum(axis=0)).ravel().astype(np.float64)
        self.label_w = LabelWeightTable(label_weights, ctx.device)
        self.cluster_w = LabelWeightTable(
            None
            if label_weights is None
            else node_weights(label_weights, freq, chain.ancestors(1), chain.level_size(1)),
            ctx.device,
        )
        # A deviation (the paper does not say how the heads start): from near-zero logits, mean BCE over all
        # clusters spends the first steps pushing every logit down, and a short budget ended there (issue 29).
        if lc.prior_bias:
            share = np.asarray(self.Yc[self.train_idx].mean(axis=0)).ravel().clip(1e-4, 1 - 1e-4)
            with torch.no_grad():
                net.generator.bias.copy_(torch.from_numpy(np.log(share / (1 - share))))
        self.budget = Budget.of(len(self.train_idx), ctx.world, lc)
        # One label per cluster: the generator is already a classifier over every label. A discriminator trained on
        # its top-b plus the forced-in positives learns which labels show up only when positive (the rare ones) and,
        # multiplied in, ranked the generator's top-10 worse than chance after a 3,000-text epoch (issue 29).
        self.discriminate = lc.flat_discriminator or chain.level_size(1) != chain.n_labels
        self.head = LightXMLHeadConfig(
            beam_size=min(lc.top_clusters, index_bounds.beam_limit(chain.n_labels)),  # wider: refused at load
            n_clusters=chain.level_size(1),
            n_labels=chain.n_labels,
            dim=lc.hidden_dim,
            faiss_min_labels=lc.export.faiss_min_labels,
            discriminator=self.discriminate,
        )
        self.swa = SWA(net, start=int(math.ceil(lc.swa_start * self.budget.per_epoch)), every=lc.swa_every)
        self.selection = ModelSelection(
            net,
            self.swa,
            tokenizer,
            [texts[i] for i in val_idx],
            self.Y[val_idx],
            lambda E: LightXMLModel(chain, E, self.head),
            lc.eval_every or self.budget.per_epoch,
            folder / "best.safetensors",
            ctx,
            lc.amp,
            log,
        )
        # Static negatives: the generator trains alone (no discriminator loss) for the first `static_from` steps.
        # Without a discriminator (flat clusters) there are no negatives to fix: static trains as dynamic does.
        static = lc.negatives == "static" and self.discriminate
        self.static_from = int(lc.static_warmup * self.budget.total) if static else 0
        self.fixed_top: np.ndarray | None = None  # static negatives: each training text's top clusters, fixed
        self.parts = (0.0, 0.0)  # the last micro-batch's (L_g, L_d), for the log

    # --- one step -------------------------------------------------------------------------------------
    def _picker(self, idx: np.ndarray, use_d: bool):
        """The candidate function forward() calls with the generator logits (dynamic) or ignores (static)."""

        def pick(g: torch.Tensor):
            if not use_d:
                return None
            b = min(self.lc.top_clusters, g.shape[1])
            top = (
                self.fixed_top[idx]
                if self.fixed_top is not None
                else torch.topk(g.detach().float(), b, dim=1).indices.cpu().numpy()
            )
            if (top < 0).any():
                raise XtagError("static negatives were not computed for a training text (resumed with another budget?)")
            labels, valid, y = training_candidates(
                top, [csr_row(self.Yc, i) for i in idx], self.members, [csr_row(self.Y, i) for i in idx]
            )
            return tuple(torch.from_numpy(a).to(g.device) for a in (labels, valid, y))

        return pick

    def step_loss(self, model, idx: np.ndarray) -> tuple[torch.Tensor, float]:
        """L = L_g + L_d (eq. 6) of a micro-batch; L_d only once the negatives are drawn (static: after the warm-up)."""
        ids, mask = self.tokenizer([self.texts[i] for i in idx])
        yc = torch.from_numpy(self.Yc[idx].toarray()).to(self.ctx.device)
        use_d = self.discriminate and (not self.static_from or self.fixed_top is not None)
        g, d, cand = model(
            torch.from_numpy(ids).to(self.ctx.device),
            torch.from_numpy(mask).to(self.ctx.device),
            self._picker(idx, use_d),
        )
        loss_g = weighted_pointwise_loss(g.float(), yc, "bce", self.cluster_w.full(len(idx)))
        loss_g = loss_g.sum() / len(idx) if self.lc.reduction == "sum" else loss_g.mean()
        loss_d = torch.zeros((), device=g.device)
        if cand is not None:
            labels, valid, y = cand
            per = weighted_pointwise_loss(d.float(), y, "bce", self.label_w.lookup(labels), base=valid)
            loss_d = per.sum() / (len(idx) if self.lc.reduction == "sum" else valid.sum().clamp(min=1.0))
        self.parts = (float(loss_g.detach()), float(loss_d.detach()))
        return loss_g + loss_d, self.parts[0] + self.parts[1]

    def log_fields(self, loop: TrainingLoop) -> dict:
        return {
            "loss_g": round(self.parts[0], 6),
            "loss_d": round(self.parts[1], 6),
            "lr": loop.sched.get_last_lr()[0],
            "swa_models": self.swa.count,
        }

    # --- static negatives ------------------------------------------------------------------------------
    def on_step(self, loop: TrainingLoop) -> None:
        if self.static_from and loop.pos.step == self.static_from:
            self.fix_negatives(loop)

    def restore(self, loop: TrainingLoop, state: dict, tensors: dict[str, torch.Tensor]) -> None:
        if self.static_from and loop.pos.step >= self.static_from:
            self.fix_negatives(loop)

    def fix_negatives(self, loop: TrainingLoop) -> None:
        """Static negatives: each training text's top-b clusters under the current generator, fixed once.

        Computed for the texts the remaining steps will visit (all of them once training goes on
        for another epoch): the same negatives as scoring every text, without encoding those the
        step budget never reaches again. Other rows hold -1.
        """
        path = self.folder / "static_top.npy"
        if path.is_file():
            with reading(path, "static negatives"):
                self.fixed_top = np.load(path, allow_pickle=False)
            return
        start = time.perf_counter()
        rows = loop.upcoming(loop.pos)
        mine = rows[self.ctx.rank :: self.ctx.world]
        b = min(self.lc.top_clusters, self.chain.level_size(1))
        top = np.zeros((0, b), dtype=np.int64)
        if len(mine):
            g = net_outputs(
                self.net,
                self.tokenizer,
                [self.texts[i] for i in mine],
                self.ctx.device,
                self.lc.amp,
                self.progress and self.ctx.is_main,
                "static negatives",
            ).cluster_scores
            top = np.argpartition(-g, b - 1, axis=1)[:, :b] if b < g.shape[1] else np.tile(np.arange(b), (len(g), 1))
        self.fixed_top = np.full((len(self.texts), b), -1, dtype=np.int64)
        self.fixed_top[rows] = self.ctx.gather_rows(top.astype(np.float32), len(rows)).astype(np.int64)
        if self.ctx.is_main:
            write_atomic(path, lambda fh: np.save(fh, self.fixed_top))
            self.log(
                {"event": "static_negatives", "documents": len(rows), "seconds": round(time.perf_counter() - start, 3)}
            )
        self.ctx.barrier()

    # --- the loop --------------------------------------------------------------------------------------
    def fit(self) -> dict:
        lc, net, budget = self.lc, self.net, self.budget
        heads = [
            g
            for m in (net.generator, net.bottleneck, net.label_embeddings)
            for g in decay_groups(m, lc.lr_head or 10 * lc.lr, lc.weight_decay)  # a deviation: the paper has one rate
        ]
        opt = torch.optim.AdamW(decay_groups(net.transformer, lc.lr, lc.weight_decay) + heads)
        # The paper's constant rate unless warm-up / decay are configured. Static negatives: the discriminator gets
        # no gradient in the generator-only phase, which DDP must be told.
        warmup = int(lc.warmup * budget.total)
        loop = TrainingLoop(
            net,
            opt,
            budget,
            lc,
            self.ctx,
            Checkpoint(self.folder / "current"),
            order=lambda epoch: epoch_order(self.train_idx, [lc.seed, epoch], self.ctx.world),
            lr_lambda=lambda step: lr_factor(step, budget.total, warmup, lc.schedule),
            callbacks=[self.swa, self, self.selection],
            log_fields=self.log_fields,
            find_unused=bool(self.static_from) or not self.discriminate,
            name="lightxml",
            desc=f"lightxml ({lc.negatives})",
            progress=self.progress,
            log=self.log,
        )
        stats = loop.run(self.step_loss)
        self.selection.finish()
        best, steps = self.selection.best, stats["steps"]
        return {
            "steps": steps,
            "epochs": round(steps / budget.per_epoch, 3),
            "steps_per_epoch": budget.per_epoch,
            "loss": stats["loss"],
            "seconds": stats["seconds"],
            "swa_models": self.swa.count,
            "best": best,
            "train_documents": len(self.train_idx),
            "validation_documents": len(self.selection.texts),
            "negatives": lc.negatives,
        }


def train_lightxml(run: TrainInputs) -> NetRunResult | None:
    """Train LightXML; returns None on DDP ranks other than 0."""
    lc = run.config.lightxml
    folder = run.checkpoint_dir / "lightxml"
    ctx, chain, tokenizer = start_tree_run(lc, folder, "clusters.npz", lambda: label_clusters(run.X, run.Y, lc))
    transformer = TextEncoder.from_pretrained(lc.encoder, "cls").transformer
    net = LightXMLNet(transformer, chain.level_size(1), chain.n_labels, lc.last_layers, lc.dropout, lc.hidden_dim).to(
        ctx.device
    )
    run.log(
        {
            "event": "lightxml",
            "encoder": str(lc.encoder),
            "clusters": chain.level_size(1),
            "labels": chain.n_labels,
            "width": net.width,
            "device": str(ctx.device),
            "world_size": ctx.world,
            "negatives": lc.negatives,
        }
    )
    weighted = head_label_weights(run.Y, run.config.missing_labels)  # the run's missing-label loss, if any
    if weighted is not None:
        run.log({"event": "head_weights", **weighted.facts})
    head_w = None if weighted is None else weighted.weights
    trainer = Trainer(net, chain, run.texts, run.Y, tokenizer, lc, ctx, folder, run.progress, run.log, head_w)
    stats = fit_or_reload(net, folder, trainer.fit, ctx, run.log, "lightxml")
    if not ctx.is_main:
        ctx.close()
        return None
    enc_config, sample = finish_run(ctx, lc, run.texts, net.width)
    return NetRunResult(LIGHTXML_NET, net.cpu().eval(), chain, tokenizer, enc_config, trainer.head, sample, stats)
