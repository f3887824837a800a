"""XR-Transformer (Algorithm 2): fine-tune an encoder coarse→fine on a preliminary tree, then XR-Linear on Φ_cat.

1. Preliminary tree from TF-IDF PIFA (training/tree/build.py).
2. For each level t: targets Y^(t) (eq. 5), relevance R̂^(t) (eq. 6), shortlist M^(t) from the
   previous level's top-k plus true parents (eq. 7-8), head bootstrapped by a linear solve on the
   previous encoder's embeddings (eq. 11), then fine-tuning of encoder + head (eq. 9); the encoder
   carries over to the next level. `epochs = 0` skips all of this (frozen pre-trained encoder).
3. Φ_cat = [TF-IDF, embedding] (eq. 10); the refined tree (PIFA over Φ_cat) and the final rankers
   come from the XR-Linear trainer unchanged.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from safetensors import SafetensorError
from safetensors.torch import load_model, save_model
from xtag.models.errors import reading
from xtag.models.families import RunResult, TrainInputs
from xtag.models.features.onnx_encoder import EncoderConfig, TextTokenizer
from xtag.models.files.atomic import replacing, write_atomic, write_text_atomic
from xtag.models.label_tree import ClusterChain
from xtag.models.xlinear.model import XLinearModel
from xtag.models.xr_transformer.concat_features import concat_features
from xtag.training.config import TrainConfig
from xtag.training.deep.checkpoint import Checkpoint
from xtag.training.deep.checkpoint import seed_all as _seed
from xtag.training.deep.distributed import DistContext
from xtag.training.deep.encoder import TextEncoder, encode_texts, load_tokenizer
from xtag.training.deep.loop import start_run
from xtag.training.deep.result import finish_run, save_encoder_folder
from xtag.training.tree.build import build_tree, pifa_embeddings
from xtag.training.weighting.label_weights import head_label_weights, level_positive_weights
from xtag.training.xlinear.config import XLinearConfig
from xtag.training.xlinear.train import train_level, train_xlinear
from xtag.training.xr_transformer.config import XRTransformerConfig
from xtag.training.xr_transformer.finetune import LevelProblem, XRNet, finetune_level


@dataclass
class XRTransformerResult(RunResult):
    """What a finished XR-Transformer run saves: rankers on Φ_cat plus the (fine-tuned) torch encoder."""

    model: XLinearModel
    encoder: TextEncoder
    tokenizer: TextTokenizer
    encoder_config: EncoderConfig
    sample_texts: list[str]

    def save(self, folder: Path) -> None:
        self.model.save(folder)
        save_encoder_folder(folder / "encoder", self.encoder, self.tokenizer, self.encoder_config, self.sample_texts)

    def summary(self) -> dict:
        return {"features": self.model.config.n_features}


def relevance(chain: ClusterChain, Y: sp.csr_matrix, t: int) -> sp.csr_matrix:
    """R̂^(t): R^(t) = Y·C counts positive labels under each node (eq. 6), ℓ1-normalised per row.

    The row weights are rescaled by the row's positive count, so positives weigh 1 on average
    against `neg_weight` (α) for negatives while nodes with more positive children weigh more.
    """
    anc = chain.ancestors(t)
    A = sp.csr_matrix(
        (np.ones(len(anc), np.float32), (np.arange(len(anc)), anc)), shape=(chain.n_labels, chain.level_size(t))
    )
    R = (Y.astype(np.float32) @ A).tocsr()
    sums = np.asarray(R.sum(axis=1)).ravel()
    counts = np.diff(R.indptr)
    scale = np.divide(counts, sums, out=np.zeros_like(sums), where=sums > 0)
    R.data *= np.repeat(scale, counts).astype(np.float32)
    return R


def top_k_parents(E: np.ndarray, W: np.ndarray, b: np.ndarray, k: int, chunk: int = 4096) -> sp.csr_matrix:
    """P^(t-1) (eq. 7): binary n × K matrix of each text's top-k nodes under the previous level's head."""
    n, K = E.shape[0], W.shape[0]
    k = min(k, K)
    cols = np.empty((n, k), dtype=np.int64)
    for lo in range(0, n, chunk):
        S = E[lo : lo + chunk] @ W.T + b
        cols[lo : lo + chunk] = np.argpartition(-S, k - 1, axis=1)[:, :k]
    rows = np.repeat(np.arange(n), k)
    return sp.csr_matrix((np.ones(n * k, np.float32), (rows, cols.ravel())), shape=(n, K))


def shortlist(chain: ClusterChain, Y: sp.csr_matrix, t: int, P: sp.csr_matrix | None) -> tuple[sp.csr_matrix, ...]:
    """(parent mask n × K_{t-1}, M^(t) n × K_t): top-k parents plus true parents, expanded to children (eq. 8)."""
    n = Y.shape[0]
    if t == 1:
        parents = sp.csr_matrix(np.ones((n, 1), dtype=np.float32))
    else:
        parents = (chain.level_targets(Y, t - 1) + P).tocsr()
        parents.data[:] = 1.0
    par = chain.parents(t)
    C = sp.csr_matrix(
        (np.ones(len(par), np.float32), (par, np.arange(len(par)))),
        shape=(chain.level_size(t - 1) if t > 1 else 1, len(par)),
    )
    M = (parents @ C).tocsr()
    M.data[:] = 1.0
    M.sort_indices()
    return parents, M


def bootstrap_head(
    E: np.ndarray,
    chain: ClusterChain,
    Y: sp.csr_matrix,
    t: int,
    parents: sp.csr_matrix,
    R: sp.csr_matrix,
    xc: XRTransformerConfig,
    n_jobs: int,
    pos_weight: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """W_init^(t) (eq. 11): cost-sensitive liblinear rankers on the previous encoder's embeddings (positives also
    weighted by `pos_weight`, the level's missing-label weights, when given)."""
    solver = XLinearConfig(
        loss="squared-hinge" if xc.loss == "squared-hinge" else "logistic", threshold=0.0, n_jobs=n_jobs
    )
    solver.tree.seed = xc.seed
    level = train_level(
        sp.csr_matrix(E),
        chain.level_targets(Y, t),
        parents.tocsc(),
        chain.ptrs[t - 1],
        solver,
        desc=f"bootstrap level {t}",
        progress=False,
        relevance=R,
        neg_weight=xc.neg_weight,
        pos_weight=pos_weight,
    )
    return level.W.toarray().astype(np.float32), level.bias.astype(np.float32)


def embeddings_file(folder: Path, t: int) -> Path:
    """Where `Embeddings` caches the training texts' embeddings under the encoder after level t."""
    return folder / f"emb_{t}.npy"


def final_embeddings_file(folder: Path, xc: XRTransformerConfig) -> Path | None:
    """The cache a finished run's Φ_cat was built from: the embeddings under its final (saved) encoder, after the
    preliminary tree's last level (level 0, the pre-trained encoder, when `epochs` is 0); None when the run's
    folder no longer shows which level that was."""
    if xc.epochs == 0:
        return embeddings_file(folder, 0)
    chain = folder / "chain.npz"
    return embeddings_file(folder, ClusterChain.load(chain).depth) if chain.is_file() else None


def phi_cat(X: sp.csr_matrix, E: np.ndarray, xc: XRTransformerConfig) -> sp.csr_matrix:
    """The rankers' features (eq. 10): Φ_cat = [TF-IDF ‖ embedding], or the embedding alone (`features: dense`)."""
    return concat_features(X if xc.features == "tfidf+dense" else None, E)


class Embeddings:
    """Embeddings of all training texts under the encoder after level t, cached as emb_t.npy for resume."""

    def __init__(
        self,
        folder: Path,
        texts: list[str],
        tokenizer: TextTokenizer,
        xc: XRTransformerConfig,
        ctx: DistContext,
        progress: bool,
        log: Callable[[dict], None],
    ):
        self.folder, self.texts, self.tokenizer, self.xc, self.ctx = folder, texts, tokenizer, xc, ctx
        self.progress, self.log = progress, log

    def get(self, encoder: TextEncoder, t: int) -> np.ndarray:
        path = embeddings_file(self.folder, t)
        if path.is_file():
            with reading(path, "cached embeddings"):
                return np.load(path, allow_pickle=False)
        start = time.perf_counter()
        mine = self.ctx.shard(len(self.texts))
        part = encode_texts(
            encoder,
            self.tokenizer,
            [self.texts[i] for i in mine],
            self.xc.encode_batch_size,
            self.ctx.device,
            self.xc.amp,
            self.progress and self.ctx.is_main,
            f"encode (level {t})",
        )
        E = self.ctx.gather_rows(part, len(self.texts))
        seconds = time.perf_counter() - start
        if self.ctx.is_main:
            write_atomic(path, lambda fh: np.save(fh, E))
            for old in self.folder.glob("emb_*.npy"):
                if old != path:
                    old.unlink()
            self.log(
                {
                    "event": "encode",
                    "level": t,
                    "documents": len(self.texts),
                    "seconds": round(seconds, 3),
                    "docs_per_s": round(len(self.texts) / max(seconds, 1e-9), 2),
                }
            )
        self.ctx.barrier()
        return E


def multi_resolution_finetune(
    encoder: TextEncoder,
    texts: list[str],
    X: sp.csr_matrix,
    Y: sp.csr_matrix,
    tokenizer: TextTokenizer,
    config: TrainConfig,
    ctx: DistContext,
    folder: Path,
    progress: bool,
    log: Callable[[dict], None],
) -> np.ndarray:
    """Algorithm 2's fine-tuning loop over the preliminary tree; returns the final training embeddings."""
    xc = config.xr_transformer
    embed = Embeddings(folder, texts, tokenizer, xc, ctx, progress, log)
    chain_path = folder / "chain.npz"
    if chain_path.is_file():
        chain = ClusterChain.load(chain_path)
    else:
        chain = build_tree(pifa_embeddings(X, Y, xc.tree.pifa_weighting), xc.tree)
        if ctx.is_main:
            chain.save(chain_path)
    log({"event": "finetune_tree", "levels": [chain.level_size(t) for t in range(1, chain.depth + 1)]})
    done = [t for t in range(1, chain.depth + 1) if (folder / f"level_{t}" / "done.json").is_file()]
    first, head = (max(done) + 1 if done else 1), None
    if done:  # resume: the encoder and head as they were after the last finished level
        state = json.loads((folder / f"level_{first - 1}" / "done.json").read_text())
        net = XRNet(encoder, np.zeros((state["nodes"], encoder.dim), np.float32), np.zeros(state["nodes"], np.float32))
        done = folder / f"level_{first - 1}" / "model.safetensors"
        with reading(done, "the finished level's weights", SafetensorError):
            load_model(net, str(done), device=str(ctx.device))
        head = (net.weight.detach().cpu().numpy(), net.bias.detach().cpu().numpy())
        log({"event": "resume", "what": f"fine-tuned levels 1..{first - 1}"})
    ckpt = Checkpoint(folder / "current")
    label_w, freq, _ = head_label_weights(Y, config.missing_labels) or (None, None, None)
    if label_w is not None:
        log({"event": "head_weights", "loss": config.missing_labels.weighting, "max": round(float(label_w.max()), 4)})
    for t in range(first, chain.depth + 1):
        _seed(xc.seed + t)
        E = embed.get(encoder, t - 1)
        P = top_k_parents(E, *head, xc.shortlist_k) if t > 1 else None
        parents, M = shortlist(chain, Y, t, P)
        R = relevance(chain, Y, t)
        pos_w = None if label_w is None else level_positive_weights(chain, label_w, freq, t)
        start = time.perf_counter()
        K = chain.level_size(t)
        resuming = (ckpt.state() or {}).get("level") == t  # the checkpoint will overwrite any init
        if xc.bootstrap and ctx.is_main and not resuming:
            W0, b0 = bootstrap_head(E, chain, Y, t, parents, R, xc, config.xlinear.n_jobs, pos_w)
        else:  # other ranks get rank 0's head when DDP wraps the model
            W0, b0 = np.zeros((K, encoder.dim), np.float32), np.zeros(K, np.float32)
        net = XRNet(encoder, W0, b0).to(ctx.device)
        log(
            {
                "event": "bootstrap",
                "level": t,
                "nodes": K,
                "seconds": round(time.perf_counter() - start, 3),
                "shortlist_mean": round(M.nnz / M.shape[0], 2),
            }
        )
        problem = LevelProblem(level=t, Y=chain.level_targets(Y, t), R=R, M=M, pos_weight=pos_w)
        stats = finetune_level(net, problem, texts, tokenizer, xc, ctx, ckpt, chain.depth, progress, log)
        head = (net.weight.detach().cpu().numpy(), net.bias.detach().cpu().numpy())
        if ctx.is_main:
            level_dir = folder / f"level_{t}"
            shutil.rmtree(level_dir, ignore_errors=True)
            level_dir.mkdir()
            with replacing(level_dir / "model.safetensors") as tmp:
                save_model(net, str(tmp))
            write_text_atomic(level_dir / "done.json", json.dumps({"nodes": K, **stats}))  # last: marks it complete
            ckpt.clear()
            shutil.rmtree(folder / f"level_{t - 1}", ignore_errors=True)
            log({"event": "finetune_level", "level": t, "nodes": K, **stats})
        ctx.barrier()
    return embed.get(encoder, chain.depth)


def train_xr_transformer(run: TrainInputs) -> XRTransformerResult | None:
    """Train an XR-Transformer; returns None on DDP ranks other than 0 (they only help fine-tune)."""
    xc = run.config.xr_transformer
    folder = run.checkpoint_dir / "xr"
    ctx = start_run(xc, folder)
    tokenizer = load_tokenizer(xc.encoder, xc.max_length)
    encoder = TextEncoder.from_pretrained(xc.encoder, xc.pooling).to(ctx.device)
    run.log(
        {
            "event": "encoder",
            "source": str(xc.encoder),
            "dim": encoder.dim,
            "device": str(ctx.device),
            "world_size": ctx.world,
            "epochs": xc.epochs,
        }
    )
    start = time.perf_counter()
    if xc.epochs > 0:
        E = multi_resolution_finetune(
            encoder, run.texts, run.X, run.Y, tokenizer, run.config, ctx, folder, run.progress, run.log
        )
    else:
        E = Embeddings(folder, run.texts, tokenizer, xc, ctx, run.progress, run.log).get(encoder, 0)
    finetune_seconds = time.perf_counter() - start
    ctx.close()  # all ranks together: the rankers below are rank 0's alone and need no process group
    if not ctx.is_main:
        return None
    Phi = phi_cat(run.X, E, xc)
    run.log(
        {
            "event": "features",
            "what": "phi_cat",
            "dim": Phi.shape[1],
            "nnz": int(Phi.nnz),
            "finetune_seconds": round(finetune_seconds, 3),
        }
    )
    model = train_xlinear(
        Phi,
        run.Y,
        run.config.xlinear,
        run.checkpoint_dir / "rankers",
        run.progress,
        run.log,
        missing_labels=run.config.missing_labels,
    )
    model = XLinearModel(model.chain, model.levels, model.config.model_copy(update={"dense_features": E.shape[1]}))
    enc_config, sample = finish_run(ctx, xc, run.texts, encoder.dim, xc.pooling, xc.features)
    return XRTransformerResult(model, encoder.cpu(), tokenizer, enc_config, sample)
