"""LaMP as a second stage: trained on a first-stage bundle's top-C candidates for the training corpus.

Steps: the first stage proposes top-C per text (its raw scores; the texts' true labels it missed are
forced in, and counted); the frozen encoder's token states are computed once and cached; label
embeddings start from PIFA or the label names; the LaMP layers train with the shared loop on
loss = BCE(final readout) + λ · Σ BCE(intermediate readouts) (section 2.5), each a mean over the
text's real candidates.

Deviations from the paper: a second stage over C candidates instead of all labels; the encoder is
frozen (the paper trains its word embeddings end to end) so that CPU training is one encoder pass;
the intermediate readouts are every one before the final (after each feature-to-label and each
label-to-label update), λ-weighted; AdamW with linear decay instead of Adam with the Transformer
schedule. LaMP must learn from candidates like those it will see at test time, not from the first
stage's over-confident top-C of texts it was trained on: either train it on texts the first stage did
not see, or set lamp.cross_fit=K to take each text's candidates from a copy of the first stage trained
without it (training/lamp/cross_fit.py), which lets LaMP and the served first stage use the same corpus.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from xtag.models.bundle.loader import load_bundle
from xtag.models.errors import XtagError
from xtag.models.families import TrainInputs
from xtag.models.lamp.masks import cooccurrence_codes, label_mask
from xtag.models.lamp.model import LampHeadConfig
from xtag.models.tagging.batches import predict_corpus
from xtag.training.deep.checkpoint import Checkpoint, fit_or_reload
from xtag.training.deep.distributed import DistContext
from xtag.training.deep.encoder import TextEncoder, load_tokenizer
from xtag.training.deep.loop import Budget, TrainingLoop, epoch_order, start_run
from xtag.training.deep.optim import decay_groups
from xtag.training.deep.result import NetRunResult, finish_run
from xtag.training.lamp.candidates import Candidates, first_stage_labels, teacher_forced
from xtag.training.lamp.config import LampConfig
from xtag.training.lamp.cross_fit import cross_fit_folds, cross_fitted_topk
from xtag.training.lamp.net import LampNet, first_layers
from xtag.training.lamp.result import LAMP_NET, LampParts
from xtag.training.lamp.selection import EpochSelection, held_out_rows, p_at_1
from xtag.training.lamp.states import StateCache, label_init, normalized, shared_basis


def readout_losses(readouts: list[torch.Tensor], y: torch.Tensor, valid: torch.Tensor) -> list[torch.Tensor]:
    """Each readout's BCE, a mean over the real candidates (padding does not count)."""
    total = valid.sum().clamp(min=1.0)
    return [(F.binary_cross_entropy_with_logits(z, y, reduction="none") * valid).sum() / total for z in readouts]


def lamp_loss(readouts: list[torch.Tensor], y: torch.Tensor, valid: torch.Tensor, weight: float) -> torch.Tensor:
    """Eq. 21: BCE of the final readout + λ × the sum of the intermediate readouts' BCE."""
    losses = readout_losses(readouts, y, valid)
    return losses[-1] + weight * sum(losses[:-1], torch.zeros(()))


class Trainer:
    """State of one LaMP run: cached token states and candidates, the loss for the shared loop."""

    def __init__(
        self, net: LampNet, cache: StateCache, cand: Candidates, codes, lc: LampConfig, ctx: DistContext, held_out
    ):
        self.net, self.cache, self.cand, self.codes, self.lc, self.ctx = net, cache, cand, codes, lc, ctx
        self.rows, self.held_out = np.setdiff1d(np.arange(len(cand.labels)), held_out), held_out
        self.budget = Budget.of(len(self.rows), ctx.world, lc)
        self.parts: list[float] = []

    def inputs(self, idx: np.ndarray) -> tuple[torch.Tensor, ...]:
        c = self.cand
        labels, valid = np.maximum(c.labels[idx], 0), c.valid[idx]
        mask = label_mask(labels, valid, self.codes, self.net.shape["n_labels"])
        arrays = (labels, c.scores[idx] * valid, mask, c.y[idx], valid)
        return tuple(torch.from_numpy(a).to(self.ctx.device) for a in arrays)

    def step_loss(self, model, idx: np.ndarray) -> tuple[torch.Tensor, float]:
        states, attention = (t.to(self.ctx.device) for t in self.cache.batch(idx))
        labels, scores, mask, y, valid = self.inputs(idx)
        readouts = self.net.head(states, attention, labels, scores, mask)
        loss = lamp_loss(readouts, y, valid, self.lc.intermediate_weight)
        self.parts = [round(float(v.detach()), 6) for v in readout_losses(readouts, y, valid)]
        return loss, float(loss.detach())

    def held_out_p_at_1(self, batch: int = 256) -> float:
        """P@1 of the final readout on the held-out texts' candidates (the head in the caller's mode)."""
        hits = 0.0
        for lo in range(0, len(self.held_out), batch):
            idx = self.held_out[lo : lo + batch]
            states, attention = (t.to(self.ctx.device) for t in self.cache.batch(idx))
            labels, scores, mask, y, valid = self.inputs(idx)
            hits += p_at_1(self.net.head(states, attention, labels, scores, mask)[-1], y, valid) * len(idx)
        return hits / len(self.held_out)

    def fit(self, folder: Path, progress: bool, log: Callable[[dict], None]) -> dict:
        lc, budget = self.lc, self.budget
        selection = EpochSelection(self.net.head, self.held_out_p_at_1, log) if len(self.held_out) else None
        loop = TrainingLoop(
            self.net,
            torch.optim.AdamW(decay_groups(self.net.head, lc.lr, lc.weight_decay)),
            budget,
            lc,
            self.ctx,
            Checkpoint(folder / "current"),
            order=lambda epoch: epoch_order(self.rows, [lc.seed, epoch], self.ctx.world),
            lr_lambda=lambda step: max(0.0, 1.0 - step / max(budget.total, 1)),
            log_fields=lambda loop: {"readout_losses": self.parts, "lr": loop.sched.get_last_lr()[0]},
            callbacks=[selection] if selection else [],
            name="lamp",
            desc="lamp",
            progress=progress,
            log=log,
        )
        stats = loop.run(self.step_loss)
        stats = {**stats, "readout_losses": self.parts, "train_documents": len(self.rows)}
        return {**stats, "selected": selection.finish()} if selection else stats


# Below this first-stage recall@C on LaMP's texts, training with teacher forcing draws a warning (debtags: 0.93,
# forcing harmless; debdeps: 0.66, forcing cost 3 points of P@1).
LOW_RECALL = 0.8


def training_candidates(
    first,
    texts: list[str],
    Y_first: sp.csr_matrix,
    C: int,
    lc: LampConfig,
    folds: int,
    folder: Path,
    train_and_export: Callable[[Any, Path, bool], Path],
    progress: bool,
    log: Callable[[dict], None],
    ray: str | None = None,
    ids: list[str] | None = None,
) -> Candidates:
    """The top-C LaMP trains on: out of `folds` folds (lamp.cross_fit, training/lamp/cross_fit.py; on the Ray
    cluster `ray` when given), else the first stage's own; teacher-forced with the true labels they miss unless
    lamp.teacher_forcing is off."""
    if folds:
        labels, scores = cross_fitted_topk(
            first, texts, Y_first, C, folds, lc.seed, folder / "folds", train_and_export, progress, log, ray, ids
        )
    else:
        own = predict_corpus(first, texts, C, progress=progress, calibrated=False)
        labels, scores = own.labels, own.scores
    truth = [Y_first.indices[Y_first.indptr[i] : Y_first.indptr[i + 1]] for i in range(len(texts))]
    return teacher_forced(labels, scores, truth, lc.teacher_forcing)


def described(label_texts, names: list[str]) -> list[str | None]:
    """lamp.init=text: each label's text from the label file, None where it says no more than its id."""
    if label_texts is None:
        raise XtagError(
            "lamp.init=text needs label texts: a first stage trained with --labels, or --labels on this run"
        )
    return [t.text if (t := label_texts.get(n)) is not None and t.has_text else None for n in names]


def train_lamp(run: TrainInputs) -> NetRunResult:
    """Train the LaMP re-ranker over `run.config.lamp.first_stage`'s candidates."""
    lc = run.config.lamp
    if lc.first_stage is None:
        raise XtagError("lamp needs a first-stage bundle: --set lamp.first_stage=BUNDLE_DIR")
    first = load_bundle(lc.first_stage)
    vocab = first.predictor.vocab
    folder = run.checkpoint_dir / "lamp"
    ctx = start_run(lc, folder)
    names = run.config.missing_labels.label_names or []
    Y_first, unknown = first_stage_labels(run.Y.tocsr(), names, vocab.index, len(vocab))
    C = min(lc.candidates, len(vocab))
    folds = cross_fit_folds(lc, first.manifest["model_kind"])
    if run.config.ray and not folds:
        run.log(
            {
                "event": "warning",
                "message": f"--ray {run.config.ray}: LaMP runs only its cross-fitting folds "
                "on Ray, and lamp.cross_fit=0 trains none; it trains here",
            }
        )
    cand = training_candidates(
        first,
        run.texts,
        Y_first,
        C,
        lc,
        folds,
        folder,
        run.train_and_export,
        run.progress,
        run.log,
        run.config.ray,
        run.doc_ids,
    )
    recall = 1 - cand.missed / max(cand.positives, 1)
    run.log(
        {
            "event": "lamp_candidates",
            "first_stage": str(lc.first_stage),
            "candidates": C,
            "positives": cand.positives,
            "teacher_forced": cand.forced,
            "first_stage_recall": round(recall, 4),
            "cross_fit_folds": folds,
            "labels_unknown_to_first_stage": unknown,
        }
    )
    if lc.teacher_forcing and recall < LOW_RECALL:
        run.log(
            {
                "event": "warning",
                "message": f"the first stage's top {C} hold only {recall:.0%} of these texts' true labels, so teacher "
                f"forcing puts {cand.forced:,} of them among the candidates; at test time none is there, and on debdeps "
                f"(66%) forcing cost LaMP 3 points of P@1 (bench/RESULTS.md): consider lamp.teacher_forcing=false",
            }
        )
    tokenizer = load_tokenizer(lc.encoder, lc.max_length)
    transformer = first_layers(TextEncoder.from_pretrained(lc.encoder, "mean").transformer, lc.encoder_layers)
    net = LampNet(transformer, len(vocab), lc.dim, lc.steps, lc.heads, lc.ffn_factor, lc.dropout)
    cache = StateCache.build(net, tokenizer, run.texts, lc.batch_size, run.progress, folder / "token_states.npy")
    held_out = held_out_rows(len(run.texts), lc.val_fraction, lc.seed)  # lamp.val_fraction: kept out of PIFA too
    Y_seen = sp.diags(np.isin(np.arange(len(run.texts)), held_out, invert=True).astype(np.float32)) @ Y_first
    texts = described(run.label_texts or first.predictor.label_texts, vocab.names) if lc.init == "text" else None
    init, from_name, from_text = label_init(
        net, tokenizer, cache, Y_seen.tocsr(), vocab.names, lc.init, lc.batch_size, texts
    )
    basis = shared_basis(init, lc.dim, lc.seed)
    with torch.no_grad():
        net.head.embedding.weight.copy_(torch.from_numpy(normalized(init @ basis.T)))
        net.head.token_in.weight.copy_(torch.from_numpy(basis))
        net.head.token_in.bias.zero_()
    codes = cooccurrence_codes(Y_first) if lc.graph == "pr" else None
    run.log(
        {
            "event": "lamp",
            "encoder": str(lc.encoder),
            "graph": lc.graph,
            "steps": lc.steps,
            "label_init": lc.init,
            "dim": lc.dim,
            "encoder_layers": int(transformer.config.num_hidden_layers),
            "labels_from_name": from_name,
            "labels_from_text": from_text,
            "cooccurring_pairs": None if codes is None else len(codes) // 2,
            "cached_token_states_mb": round(cache.nbytes / 2**20, 1),
            "token_cache": "token ids" if cache.net is not None else "float16, memory-mapped",
        }
    )
    net = net.to(ctx.device)
    trainer = Trainer(net, cache, cand, codes, lc, ctx, held_out)
    try:
        stats = fit_or_reload(net, folder, lambda: trainer.fit(folder, run.progress, run.log), ctx, run.log, "lamp")
    finally:
        cache.close()
    enc_config, sample = finish_run(ctx, lc, run.texts, net.hidden, pooling="mean")
    head = LampHeadConfig(candidates=C, graph=lc.graph, steps=lc.steps, heads=lc.heads, dim=lc.dim, n_labels=len(vocab))
    return NetRunResult(LAMP_NET, net.cpu().eval(), None, tokenizer, enc_config, LampParts(head, codes), sample, stats)
