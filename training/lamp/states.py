"""The frozen encoder's token states of every training text, computed once and kept (ragged; as token ids
over the embeddings alone, else float16 in a memory-mapped file).

With the encoder frozen, its states do not change between epochs: caching them makes each LaMP step cost
only the LaMP layers (on 2 CPU cores, the encoder is most of a forward pass). Also the texts' mean-pooled
embeddings (PIFA) and the label names' (label embedding initialisation).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm
from xtag.models.features.onnx_encoder import TextTokenizer, length_sorted_batches
from xtag.training.deep.encoder import pool, run_batched

CPU = torch.device("cpu")


class MeanStates(nn.Module):
    """ids, mask → the mean of the encoder's token states (the pooled text embedding)."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return pool(self.net.states(ids, mask), mask, "mean")


class StateCache:
    """Every training text's frozen token states, read back per batch; its memory does not grow with the corpus.

    Two forms. Over the token embeddings alone (lamp.encoder_layers=0) a state is a table lookup, so the cache
    keeps the token ids (4 bytes a token, not 768) and looks the states up per batch: debtags' 22K texts cost
    5 MB instead of 1 GB. Over contextual layers the states are float16 rows in a memory-mapped file
    (`path`), written once, paged in by the OS as batches read them, deleted after training.
    """

    def __init__(self, data: np.ndarray, offsets: np.ndarray, net: nn.Module | None = None):
        self.data, self.offsets, self.net = data, offsets, net  # net: states looked up from ids per batch

    @classmethod
    @torch.inference_mode()
    def build(cls, net: nn.Module, tokenizer: TextTokenizer, texts: list[str], batch: int, progress: bool, path: Path):
        ids, mask, lengths = tokenizer.encode(texts)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        if int(net.transformer.config.num_hidden_layers) == 0:
            return cls(ids[mask.astype(bool)].astype(np.int32), offsets, net)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = np.lib.format.open_memmap(path, mode="w+", dtype=np.float16, shape=(int(offsets[-1]), net.hidden))
        rows = np.arange(ids.shape[1])
        with frozen(net.transformer):
            for idx in tqdm(length_sorted_batches(lengths, batch), desc="token states", disable=not progress):
                width = int(lengths[idx].max())
                hidden = net.states(torch.from_numpy(ids[idx, :width]), torch.from_numpy(mask[idx, :width]))
                keep = rows[None, :width] < lengths[idx, None]  # real tokens, row by row: the cache's order
                order = np.concatenate([np.arange(offsets[i], offsets[i + 1]) for i in idx])
                data[order] = hidden.float().numpy()[keep]
        data.flush()
        return cls(data, offsets)

    @property
    def nbytes(self) -> int:
        """Bytes the cache keeps (on disk for the memory-mapped form, which the OS pages in and out)."""
        return int(self.data.nbytes)

    def close(self) -> None:
        """Drop the memory-mapped file, if any (a resumed run builds it again)."""
        if isinstance(self.data, np.memmap):
            path = Path(self.data.filename)
            self.data = np.empty((0, self.data.shape[1]), dtype=np.float16)
            path.unlink(missing_ok=True)

    def batch(self, idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """(states n × longest × dim float32, attention mask n × longest) of the texts `idx`."""
        lengths = self.offsets[idx + 1] - self.offsets[idx]
        keep = np.arange(int(lengths.max()))[None, :] < lengths[:, None]
        order = np.concatenate([np.arange(self.offsets[i], self.offsets[i + 1]) for i in idx])
        mask = torch.from_numpy(keep.astype(np.int64))
        if self.net is not None:
            ids = np.zeros(keep.shape, dtype=np.int64)
            ids[keep] = self.data[order]
            device = next(self.net.transformer.parameters()).device  # the net's, once it moved (CUDA)
            with torch.no_grad(), frozen(self.net.transformer):  # no layer: the states are the embedding layer's
                return self.net.transformer.embeddings(input_ids=torch.from_numpy(ids).to(device)).float(), mask.to(
                    device
                )
        states = np.zeros((*keep.shape, self.data.shape[1]), dtype=np.float32)
        states[keep] = self.data[order]
        return torch.from_numpy(states), mask

    def means(self, batch: int = 256) -> np.ndarray:
        """n × dim: each text's mean token state (what `MeanStates` gives), from the cache, a batch at a time."""
        n = len(self.offsets) - 1
        out = np.empty((n, self.data.shape[1] if self.net is None else self.net.hidden), dtype=np.float32)
        for lo in range(0, n, batch):
            states, mask = self.batch(np.arange(lo, min(lo + batch, n)))
            out[lo : lo + batch] = pool(states, mask, "mean").cpu().numpy()
        return out


@contextmanager
def frozen(module: nn.Module) -> Iterator[None]:
    """`module` in eval mode meanwhile (no dropout: the cached states are the eval ones), then as it was."""
    was = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(was)


def normalized(a: np.ndarray) -> np.ndarray:
    return a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)


def label_init(
    net: nn.Module,
    tokenizer: TextTokenizer,
    cache: StateCache,
    Y,
    names: list[str],
    init: str,
    batch: int,
    texts: list[str | None] | None = None,
) -> tuple[np.ndarray, int, int]:
    """L × dim unit rows, and how many labels started from their name and from their text.

    pifa: PIFA (the normalised sum of the label's texts' normalised embeddings) where the label has training texts,
    else the encoder's embedding of the label's name; name: the name's embedding. text (`texts`: each label's text
    from the label file, None where it says no more than its id): the encoder's mean token state over the label's
    text, the same embedding a name gets, so a label with text but no training document starts where documents
    that speak of it would point; labels without text as pifa. Every row is then scaled to unit norm, as PIFA's and
    the names' are, so no start outweighs another in the attention."""
    out = np.zeros((len(names), net.hidden), dtype=np.float32)
    described = np.array([t is not None for t in texts], bool) if init == "text" and texts else np.zeros(0, bool)
    if init in ("pifa", "text"):
        out = np.asarray(Y.T.tocsr() @ normalized(cache.means()), dtype=np.float32)
    from_text = np.flatnonzero(described)
    if len(from_text):
        out[from_text] = run_batched(MeanStates(net), tokenizer, [texts[j] for j in from_text], batch, CPU)[0]
    from_name = np.flatnonzero(np.linalg.norm(out, axis=1) == 0)
    if len(from_name):
        readable = [names[j].replace("::", " ").replace("_", " ").replace("-", " ") for j in from_name]
        out[from_name] = run_batched(MeanStates(net), tokenizer, readable, batch, CPU)[0]
    return normalized(out), len(from_name), len(from_text)


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
