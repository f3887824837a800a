"""CascadeXML (Kharbanda et al. 2022): every label resolution trained end to end in one transformer pass.

Each step: one forward pass; resolution 0 scores all its clusters from the concatenated [CLS] vectors
of its layers; resolution r + 1 scores, from its own layer's [CLS] vector, the children of resolution
r's current top-k_r nodes plus the children of the text's true nodes at r (teacher forcing), so every
positive is always scored. Loss: Σ_r w_r · BCE_r (each a mean over the level's scored nodes; under a
missing-label loss its positives weighted, as LightXML's, by their label's or cluster's weight). AdamW:
encoder at lr, heads at lr_head_factor × lr with weight decay / 10; cosine warm-up, constant, cosine
annealing. AMP, gradient accumulation, DDP, checkpoints and resume come from the shared loop.

Deviations from the reference, for this project's budgets: MiniLM-L6 by default (layer recipe scaled
in training/cascadexml/recipe.py); the shortlist is the top-k plus the true parents (a union of
varying width) rather than a fixed-width top-k whose true parents displace the lowest; no held-out
model selection (the reference trains a fixed number of epochs too); the optional TF-IDF ‖ [CLS]
one-vs-all classifier of appendix A.3 is not implemented. The missing-label losses (Schultheis thesis
ch. 3, `missing_labels.weighting`) are an addition the reference does not have.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from xtag.models.cascadexml.cascade import child_tables, expand, top_nodes, with_true_parents
from xtag.models.cascadexml.model import CascadeHeadConfig
from xtag.models.families import TrainInputs
from xtag.models.features.onnx_encoder import TextTokenizer
from xtag.models.label_tree import ClusterChain
from xtag.training.cascadexml.config import CascadeXMLConfig
from xtag.training.cascadexml.net import CascadeXMLNet
from xtag.training.cascadexml.recipe import default_dropouts, default_layers, level_top_k, per_level, resolutions
from xtag.training.cascadexml.result import CASCADEXML_NET
from xtag.training.cascadexml.schedule import cascade_lr_factor
from xtag.training.config import TrainConfig
from xtag.training.deep.checkpoint import Checkpoint, fit_or_reload
from xtag.training.deep.distributed import DistContext
from xtag.training.deep.encoder import TextEncoder
from xtag.training.deep.loop import Budget, TrainingLoop, epoch_order, start_tree_run
from xtag.training.deep.losses import LabelWeightTable, weighted_pointwise_loss
from xtag.training.deep.optim import decay_groups
from xtag.training.deep.padded_candidates import csr_row, pad_rows
from xtag.training.deep.result import NetRunResult, finish_run
from xtag.training.weighting.label_weights import head_label_weights, level_positive_weights


def training_shortlist(
    logits: np.ndarray, nodes: np.ndarray, k: int, table: np.ndarray, true_parents: list[np.ndarray]
) -> list[np.ndarray]:
    """Resolution r + 1's training candidates per row: the children of r's top-k nodes and of its true nodes."""
    parents, _ = top_nodes(logits, nodes, k)
    out = []
    for p in with_true_parents(parents, true_parents):
        children, _ = expand(p[None, :], table)
        out.append(children[0][children[0] >= 0])
    return out


class Trainer:
    """State of one CascadeXML run: the cascade's loss for the shared loop (training/deep/loop.py)."""

    def __init__(
        self,
        net: CascadeXMLNet,
        chain: ClusterChain,
        texts: list[str],
        Y: sp.csr_matrix,
        tokenizer: TextTokenizer,
        cc: CascadeXMLConfig,
        top_k: list[int],
        weights: list[float],
        ctx: DistContext,
        folder: Path,
        progress: bool,
        log: Callable[[dict], None],
        level_weights: list[np.ndarray] | None = None,
    ):
        self.net, self.chain, self.texts, self.tokenizer, self.cc, self.ctx = net, chain, texts, tokenizer, cc, ctx
        self.top_k, self.weights, self.folder, self.progress, self.log = top_k, weights, folder, progress, log
        self.targets = [chain.level_targets(Y.tocsr(), t) for t in range(1, chain.depth + 1)]  # node order
        # Missing-label loss: per resolution, the positive weight of each node (`level_weights`); None: plain BCE.
        self.level_w = [LabelWeightTable(w, ctx.device) for w in level_weights or [None] * chain.depth]
        self.tables = child_tables(chain)
        self.rows = np.arange(len(texts))
        self.budget = Budget.of(len(texts), ctx.world, cc)
        self.parts: list[float] = [0.0] * chain.depth  # the last micro-batch's per-resolution losses, for the log

    def _shortlist(self, idx: np.ndarray, device: torch.device):
        """The candidate function forward() calls with each resolution's logits (teacher-forced top-k)."""
        state: dict[str, np.ndarray] = {}

        def shortlist(r: int, z: torch.Tensor):
            logits = z.detach().float().cpu().numpy()
            nodes = state.get("nodes", np.broadcast_to(np.arange(logits.shape[1]), logits.shape))
            truth = [csr_row(self.targets[r - 1], i) for i in idx]
            rows = training_shortlist(logits, nodes, self.top_k[r - 1], self.tables[r - 1], truth)
            ids, valid, y = pad_rows(rows, [csr_row(self.targets[r], i) for i in idx])
            state["nodes"] = np.where(valid > 0, ids, -1)
            return tuple(torch.from_numpy(a).to(device) for a in (ids, valid, y))

        return shortlist

    def step_loss(self, model, idx: np.ndarray) -> tuple[torch.Tensor, float]:
        """Σ_r w_r · BCE_r of a micro-batch: resolution 0 over all its nodes, the others over their shortlist."""
        device = self.ctx.device
        ids, mask = self.tokenizer([self.texts[i] for i in idx])
        out = model(
            torch.from_numpy(ids).to(device),
            torch.from_numpy(mask).to(device),
            shortlist=self._shortlist(idx, device),
        )
        losses = []
        for r, (z, cand) in enumerate(out):
            if cand is None:
                y = torch.from_numpy(self.targets[r][idx].toarray()).to(device)
                pos = self.level_w[r].full(len(idx))
                if pos is None:  # torch's fused mean: plain runs train bit for bit as before weights existed
                    losses.append(F.binary_cross_entropy_with_logits(z.float(), y))
                else:
                    losses.append(weighted_pointwise_loss(z.float(), y, "bce", pos).mean())
            else:
                nodes, valid, y = cand
                per = weighted_pointwise_loss(z.float(), y, "bce", self.level_w[r].lookup(nodes), base=valid)
                losses.append(per.sum() / valid.sum().clamp(min=1.0))
        self.parts = [float(v.detach()) for v in losses]
        total = sum(w * v for w, v in zip(self.weights, losses))
        return total, float(total.detach())

    def log_fields(self, loop: TrainingLoop) -> dict:
        return {"level_losses": [round(v, 6) for v in self.parts], "lr": loop.sched.get_last_lr()[0]}

    def fit(self) -> dict:
        cc, net, budget = self.cc, self.net, self.budget
        head_lr = cc.lr * cc.lr_head_factor
        groups = decay_groups(net.transformer, cc.lr, cc.weight_decay)
        for module in net.heads():
            groups += decay_groups(module, head_lr, cc.weight_decay / 10)
        loop = TrainingLoop(
            net,
            torch.optim.AdamW(groups),
            budget,
            cc,
            self.ctx,
            Checkpoint(self.folder / "current"),
            order=lambda epoch: epoch_order(self.rows, [cc.seed, epoch], self.ctx.world),
            lr_lambda=lambda step: cascade_lr_factor(step, budget.total, cc.warmup, cc.anneal),
            log_fields=self.log_fields,
            name="cascadexml",
            desc="cascadexml",
            progress=self.progress,
            log=self.log,
        )
        stats = loop.run(self.step_loss)
        return {
            "steps": stats["steps"],
            "epochs": round(stats["steps"] / budget.per_epoch, 3),
            "steps_per_epoch": budget.per_epoch,
            "loss": stats["loss"],
            "level_losses": self.parts,
            "seconds": stats["seconds"],
            "train_documents": len(self.texts),
        }


def level_weights(chain: ClusterChain, Y: sp.csr_matrix, config: TrainConfig, log) -> list[np.ndarray] | None:
    """The run's missing-label loss as each resolution's per-node positive weights (None: plain BCE), logged.

    The labels' head weights u_j (training/weighting/label_weights.py: w⁺c⁺ rescaled to mean 1 per observed
    positive) at the label level; at each coarser resolution a cluster's positive weighs its labels'
    occurrence-weighted mean (`level_positive_weights`), the weight a positive carries on average below it.
    """
    weighted = head_label_weights(Y, config.missing_labels)
    if weighted is None:
        return None
    levels = [level_positive_weights(chain, weighted.weights, weighted.freq, t) for t in range(1, chain.depth + 1)]
    log({"event": "head_weights", **weighted.facts, "level_max": [round(float(w.max()), 4) for w in levels]})
    return levels


def build_net(cc: CascadeXMLConfig, chain: ClusterChain) -> tuple[CascadeXMLNet, list[int], list[float]]:
    """The net over the configured (or default) layer recipe; also each cluster level's top-k and loss weights."""
    transformer = TextEncoder.from_pretrained(cc.encoder, "cls").transformer
    sizes = [chain.level_size(t) for t in range(1, chain.depth + 1)]
    depth = int(transformer.config.num_hidden_layers)
    layers = per_level(cc.layers, len(sizes), default_layers(depth, len(sizes)), "layers")
    dropouts = per_level(cc.dropouts, len(sizes), default_dropouts(len(sizes)), "dropouts")
    weights = per_level(cc.loss_weights, len(sizes), [1.0] * len(sizes), "loss_weights")
    net = CascadeXMLNet(transformer, sizes, layers, dropouts, cc.feature_dropout)
    return net, level_top_k(cc, sizes), weights


def train_cascadexml(run: TrainInputs) -> NetRunResult | None:
    """Train CascadeXML; returns None on DDP ranks other than 0."""
    cc = run.config.cascadexml
    folder = run.checkpoint_dir / "cascadexml"
    ctx, chain, tokenizer = start_tree_run(cc, folder, "resolutions.npz", lambda: resolutions(run.X, run.Y, cc))
    net, top_k, weights = build_net(cc, chain)
    net = net.to(ctx.device)
    run.log(
        {
            "event": "cascadexml",
            "encoder": str(cc.encoder),
            "resolutions": net.sizes,
            "layers": net.layers,
            "top_k": top_k,
            "device": str(ctx.device),
            "world_size": ctx.world,
        }
    )
    levels = level_weights(chain, run.Y, run.config, run.log)
    trainer = Trainer(
        net, chain, run.texts, run.Y, tokenizer, cc, top_k, weights, ctx, folder, run.progress, run.log, levels
    )
    stats = fit_or_reload(net, folder, trainer.fit, ctx, run.log, "cascadexml")
    if not ctx.is_main:
        ctx.close()
        return None
    enc_config, sample = finish_run(ctx, cc, run.texts, net.hidden)
    head = CascadeHeadConfig(sizes=net.sizes, top_k=top_k, dim=net.hidden, outputs=cc.export.outputs)
    return NetRunResult(CASCADEXML_NET, net.cpu().eval(), chain, tokenizer, enc_config, head, sample, stats)
