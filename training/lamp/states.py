"""The frozen encoder's token states of every training text, computed once and kept (float16, ragged).

With the encoder frozen, its states do not change between epochs: caching them makes each LaMP step cost
only the LaMP layers (on 2 CPU cores, the encoder is most of a forward pass). Also the texts' mean-pooled
embeddings (PIFA) and the label names' (label embedding initialisation).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm
from xtag.models.features.onnx_encoder import TextTokenizer, length_sorted_batches
from xtag.training.deep.encoder import pool, run_batched


class MeanStates(nn.Module):
    """ids, mask → the mean of the encoder's token states (the pooled text embedding)."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return pool(self.net.states(ids, mask), mask, "mean")


class StateCache:
    def __init__(self, data: np.ndarray, offsets: np.ndarray):
        self.data, self.offsets = data, offsets

    @classmethod
    @torch.inference_mode()
    def build(cls, net: nn.Module, tokenizer: TextTokenizer, texts: list[str], batch: int, progress: bool):
        lengths = tokenizer.lengths(texts)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        data = np.empty((int(offsets[-1]), net.hidden), dtype=np.float16)
        was = net.training
        net.eval()
        for idx in tqdm(length_sorted_batches(lengths, batch), desc="token states", disable=not progress):
            ids, mask = tokenizer([texts[i] for i in idx])
            hidden = net.states(torch.from_numpy(ids), torch.from_numpy(mask)).float().numpy()
            for row, i in enumerate(idx):
                data[offsets[i] : offsets[i + 1]] = hidden[row, : lengths[i]]
        net.train(was)
        return cls(data, offsets)

    def batch(self, idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """(states n × longest × dim float32, attention mask n × longest) of the texts `idx`."""
        lengths = self.offsets[idx + 1] - self.offsets[idx]
        states = np.zeros((len(idx), int(lengths.max()), self.data.shape[1]), dtype=np.float32)
        mask = np.zeros((len(idx), int(lengths.max())), dtype=np.int64)
        for row, i in enumerate(idx):
            states[row, : lengths[row]] = self.data[self.offsets[i] : self.offsets[i + 1]]
            mask[row, : lengths[row]] = 1
        return torch.from_numpy(states), torch.from_numpy(mask)

    def means(self) -> np.ndarray:
        """n × dim: each text's mean token state (what `MeanStates` gives), from the cache."""
        sums = np.add.reduceat(self.data.astype(np.float32), self.offsets[:-1], axis=0)
        return sums / np.diff(self.offsets)[:, None]


def normalized(a: np.ndarray) -> np.ndarray:
    return a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)


def label_init(
    net: nn.Module, tokenizer: TextTokenizer, cache: StateCache, Y, names: list[str], init: str, batch: int
) -> tuple[np.ndarray, int]:
    """L × dim unit rows: PIFA (the normalised sum of the label's texts' normalised embeddings) where the
    label has training texts and `init` is pifa, else the encoder's embedding of the label's name; also how
    many labels started from their name."""
    out = np.zeros((len(names), net.hidden), dtype=np.float32)
    if init == "pifa":
        out = np.asarray(Y.T.tocsr() @ normalized(cache.means()), dtype=np.float32)
    from_name = np.flatnonzero(np.linalg.norm(out, axis=1) == 0)
    if len(from_name):
        readable = [names[j].replace("::", " ").replace("_", " ").replace("-", " ") for j in from_name]
        out[from_name] = run_batched(MeanStates(net), tokenizer, readable, batch, torch.device("cpu"))[0]
    return normalized(out), len(from_name)


def shared_basis(init: np.ndarray, dim: int, seed: int) -> np.ndarray:
    """dim × hidden orthonormal rows: the label embeddings' principal directions first, random ones after.
    The token projection starts as this basis and the label embeddings as their coordinates in it, so labels
    and tokens start in one space, as they were in the encoder's."""
    hidden = init.shape[1]
    if dim > hidden:
        raise ValueError(f"lamp.dim {dim} is larger than the encoder's hidden size {hidden}")
    _, _, vt = np.linalg.svd(init - init.mean(axis=0), full_matrices=False)
    rows = np.vstack([vt[:dim], np.random.default_rng(seed).normal(size=(dim, hidden))])
    q, _ = np.linalg.qr(rows.T)  # Gram-Schmidt in row order: the principal directions survive as they are
    return q[:, :dim].T.astype(np.float32)
