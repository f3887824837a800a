"""The teacher a static table is distilled from: a local Hugging Face / sentence-transformers folder, or the
fine-tuned encoder of an xr-transformer or cascadexml run (loaded by training/deep/encoder.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer
from xtag.models.errors import XtagError
from xtag.models.features.onnx_encoder import Pooling, TextTokenizer
from xtag.training.deep.encoder import TextEncoder, encode_texts, load_tokenizer


def encoder_folder(source: Path) -> Path:
    """The Hugging Face folder behind `source`: a run directory, a run's model/ folder, or the folder itself."""
    for folder in (source / "model" / "encoder", source / "encoder", source):
        if (folder / "config.json").is_file():
            return folder
    raise XtagError(f"{source}: not a Hugging Face model folder nor a transformer run (no config.json)")


def _pooling(folder: Path) -> Pooling:
    """xtag's encoder config of a run, else sentence-transformers' 1_Pooling config, else mean."""
    for path, cls_key in ((folder / "xtag_encoder.json", None), (folder / "1_Pooling" / "config.json", "")):
        if path.is_file():
            settings = json.loads(path.read_text())
            if cls_key is None:
                return "cls" if settings.get("pooling") == "cls" else "mean"
            return "cls" if settings.get("pooling_mode_cls_token") else "mean"
    return "mean"


@dataclass
class Teacher:
    encoder: TextEncoder
    tokenizer: Tokenizer  # the raw tokenizer.json the static block ships
    source: str

    @classmethod
    def load(cls, source: Path) -> Teacher:
        folder = encoder_folder(Path(source))
        encoder = TextEncoder.from_pretrained(folder, _pooling(folder))
        tokenizer = Tokenizer.from_str(load_tokenizer(folder, 8).tokenizer.to_str())
        tokenizer.no_truncation()
        tokenizer.no_padding()
        return cls(encoder.eval(), tokenizer, str(folder))

    @property
    def dim(self) -> int:
        return self.encoder.dim

    @torch.inference_mode()
    def token_vectors(self, batch_size: int) -> np.ndarray:
        """vocabulary × hidden: every token alone between the tokenizer's special tokens, pooled as the teacher
        pools (model2vec's distillation); three positions per row, so a batch of 1024 is cheap on a CPU."""
        vocab = self.tokenizer.get_vocab_size()
        specials = self.tokenizer.post_process(self.tokenizer.encode("", add_special_tokens=False)).ids
        head, tail = specials[:1], specials[1:]  # BERT: [CLS] token [SEP]; no post-processor: the token alone
        out = np.empty((vocab, self.dim), dtype=np.float32)
        for lo in range(0, vocab, batch_size):
            ids = torch.arange(lo, min(lo + batch_size, vocab), dtype=torch.long)[:, None]
            parts = [torch.tensor(head, dtype=torch.long).expand(len(ids), -1), ids]
            parts.append(torch.tensor(tail, dtype=torch.long).expand(len(ids), -1))
            batch = torch.cat(parts, dim=1)
            out[lo : lo + len(ids)] = self.encoder(batch, torch.ones_like(batch)).float().numpy()
        return out

    def text_vectors(self, texts: list[str], max_length: int, batch_size: int) -> np.ndarray:
        """n × hidden pooled outputs of the training texts (the targets of tune=corpus)."""
        tokenizer = TextTokenizer(Tokenizer.from_str(self.tokenizer.to_str()), max_length)
        return encode_texts(self.encoder, tokenizer, texts, batch_size, torch.device("cpu"))
