"""Torch text encoder for training (a Hugging Face model + pooling); serving uses models/features/onnx_encoder.py.

Imported only by training/: the inference path must load without torch.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm
from xtag.models.errors import XtagError
from xtag.models.features.onnx_encoder import EncoderConfig, Pooling, TextTokenizer, length_sorted_batches


def pool(hidden: torch.Tensor, mask: torch.Tensor, pooling: Pooling) -> torch.Tensor:
    """Mean over real tokens or the [CLS] token (the numpy twin is models/onnx_encoder.pool_numpy)."""
    if pooling == "cls":
        return hidden[:, 0]
    w = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * w).sum(dim=1) / w.sum(dim=1).clamp(min=1e-9)


def load_tokenizer(model_dir: Path, max_length: int) -> TextTokenizer:
    """The directory's tokenizer.json, or its slow-tokenizer files converted in memory when it has none."""
    path = Path(model_dir) / "tokenizer.json"
    if path.is_file():
        return TextTokenizer.load(path, max_length)
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    try:
        fast = AutoTokenizer.from_pretrained(str(model_dir), use_fast=True)
    except (OSError, ValueError) as exc:
        raise XtagError(f"{model_dir}: no usable tokenizer ({exc})") from exc
    return TextTokenizer(Tokenizer.from_str(fast.backend_tokenizer.to_str()), max_length)


class TextEncoder(nn.Module):
    """Φ_dnn: a pre-trained transformer whose token states are pooled into one vector per text."""

    def __init__(self, transformer: nn.Module, pooling: Pooling, source: str = ""):
        super().__init__()
        self.transformer, self.pooling, self.source = transformer, pooling, source
        pooler = getattr(transformer, "pooler", None)  # BERT's [CLS] pooler head: our pooling never uses it,
        if isinstance(pooler, nn.Module):  # and DDP refuses parameters that get no gradient
            pooler.requires_grad_(False)

    @property
    def dim(self) -> int:
        return int(self.transformer.config.hidden_size)

    @classmethod
    def from_pretrained(cls, model_dir: Path, pooling: Pooling, attn_implementation: str | None = None) -> TextEncoder:
        from transformers import AutoModel
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # one bar per weight file is noise in training logs
        if not (Path(model_dir) / "config.json").is_file():
            raise XtagError(f"{model_dir}: not a Hugging Face model directory (no config.json)")
        kwargs = {"attn_implementation": attn_implementation} if attn_implementation else {}
        transformer = AutoModel.from_pretrained(str(model_dir), **kwargs)
        return cls(transformer, pooling, source=str(model_dir))

    def hidden(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.transformer(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return pool(self.hidden(input_ids, attention_mask), attention_mask, self.pooling)


def trained_config(folder: Path) -> EncoderConfig:
    """The encoder config of a run's model/encoder, without loading its weights."""
    return EncoderConfig.model_validate(json.loads((folder / "xtag_encoder.json").read_text()))


def load_trained(folder: Path, attn_implementation: str | None = None) -> tuple[TextEncoder, EncoderConfig]:
    """The encoder of a run's model/encoder (training/deep/result.save_encoder_folder) and its encoder config."""
    config = trained_config(folder)
    return TextEncoder.from_pretrained(folder, config.pooling, attn_implementation), config


@torch.inference_mode()
def run_batched(
    module: nn.Module,
    tokenizer: TextTokenizer,
    texts: list[str],
    batch_size: int,
    device: torch.device,
    amp: bool = False,
    progress: bool = False,
    desc: str = "encode",
) -> tuple[np.ndarray, ...]:
    """`module(ids, mask)` over texts batched by similar length, eval mode for the duration; each output
    (one tensor or a tuple of them, rows = texts) as a float32 array in the order of `texts`."""
    was_training = module.training
    module.eval()
    outs: list[np.ndarray] = []
    lengths = tokenizer.lengths(texts)
    batches = length_sorted_batches(lengths, batch_size)
    # The bar counts tokens, not batches: the longest texts come first, so a per-batch rate would
    # promise an ETA several times too long at the start.
    with tqdm(
        total=int(lengths.sum()), desc=desc, unit="tok", unit_scale=True, disable=not progress, smoothing=0.05
    ) as bar:
        for idx in batches:
            ids, mask = tokenizer([texts[i] for i in idx])
            with torch.autocast(device.type, enabled=amp and device.type == "cuda"):
                result = module(torch.from_numpy(ids).to(device), torch.from_numpy(mask).to(device))
            result = result if isinstance(result, tuple) else (result,)
            if not outs:
                outs = [np.empty((len(texts), r.shape[1]), dtype=np.float32) for r in result]
            for out, r in zip(outs, result):
                out[idx] = r.float().cpu().numpy()
            bar.update(int(lengths[idx].sum()))
    module.train(was_training)
    return tuple(outs)


def encode_texts(
    encoder: nn.Module,
    tokenizer: TextTokenizer,
    texts: list[str],
    batch_size: int,
    device: torch.device,
    amp: bool = False,
    progress: bool = False,
    desc: str = "encode",
) -> np.ndarray:
    """n × dim float32 embeddings, batched by similar length; eval mode for the duration."""
    if not texts:
        dim = encoder.dim if hasattr(encoder, "dim") else encoder.module.dim
        return np.empty((0, dim), dtype=np.float32)
    return run_batched(encoder, tokenizer, texts, batch_size, device, amp, progress, desc)[0]
