"""Static token embeddings (model2vec's idea): tokenise → weighted mean of a float16 table's rows → L2.

The dense block of XR-Linear's Φ_cat without a transformer at serving: a text costs one `encode_batch`
and a gather over its token ids. Per-token weights are stored with the table (SIF, a/(a+p), from the
training corpus's token frequencies); with `in_text = "tfidf"` a token's weight inside a text is also
multiplied by its idf and a sublinear count (Astec's TF-IDF-weighted bag of embeddings) instead of its
plain count. The same weights give `weight_matrix` (texts × vocabulary), which training fits the table
with, so the features a table was fitted for are the features served.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict, Field
from tokenizers import Tokenizer
from xtag.models.errors import XtagError, reading

TABLE, WEIGHTS, IDF, TOKENIZER, CONFIG = "table.npy", "weights.npy", "idf.npy", "tokenizer.json", "config.json"


def token_ids(tokenizer: Tokenizer, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(ids, indptr): every text's token ids (no special tokens) flattened, and where each text starts; the
    one tokenisation of the static block, for serving and for the token statistics training derives."""
    encodings = tokenizer.encode_batch(list(texts), add_special_tokens=False)
    lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
    indptr = np.zeros(len(encodings) + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    ids = np.fromiter((i for e in encodings for i in e.ids), dtype=np.int64, count=int(indptr[-1]))
    return ids, indptr


class StaticEncoderConfig(BaseModel):
    """features/static/config.json: how texts become vectors and how strongly the block counts in Φ_cat."""

    model_config = ConfigDict(extra="forbid")

    dim: int = Field(..., ge=1, description="columns of the token table")
    vocab_size: int = Field(..., ge=1, description="rows of the token table (the tokenizer's vocabulary)")
    in_text: Literal["count", "tfidf"] = Field(
        "count", description="a token's weight in a text: SIF × count, or SIF × (1 + log count) × idf (Astec)"
    )
    max_tokens: int = Field(512, ge=1, description="tokens read per text (the rest is cut)")
    alpha: float = Field(1.0, gt=0, description="Φ_cat = [TF-IDF/‖·‖, α · static/‖·‖]")
    source: str = Field("", description="the teacher the table was distilled from")
    tune: str = Field("none", description="how the table was fitted after distillation")


class StaticEncoder:
    """Texts → n × dim float32 unit rows (zero rows for texts without a known token)."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        table: np.ndarray,
        weights: np.ndarray,
        idf: np.ndarray,
        config: StaticEncoderConfig,
    ):
        if table.shape != (config.vocab_size, config.dim) or weights.shape != (config.vocab_size,):
            raise XtagError(
                f"static table {table.shape} and weights {weights.shape} do not match "
                f"vocab_size {config.vocab_size} × dim {config.dim}"
            )
        if idf.shape != weights.shape:
            raise XtagError(f"static idf has shape {idf.shape}, expected {weights.shape}")
        self.tokenizer, self.config = tokenizer, config
        # Rounded to float16 (what the bundle stores, so training sees what serving sees), held as float32 so a
        # request gathers rows without converting them.
        self.table = np.asarray(table, dtype=np.float16).astype(np.float32)
        self.weights, self.idf = weights.astype(np.float32), idf.astype(np.float32)
        tokenizer.no_padding()
        tokenizer.enable_truncation(config.max_tokens)

    @property
    def dim(self) -> int:
        return self.config.dim

    def weighted_tokens(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(data, ids, indptr): each text's distinct tokens (sorted) with their weights summing to 1 per text,
        a CSR row per text; texts whose tokens all weigh 0 get an empty row."""
        n = len(texts)
        ids, indptr = token_ids(self.tokenizer, texts)
        rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
        keys, counts = np.unique(rows * self.config.vocab_size + ids, return_counts=True)
        rows, ids = keys // self.config.vocab_size, keys % self.config.vocab_size
        w = self.weights[ids].astype(np.float64)
        if self.config.in_text == "tfidf":
            w *= (1.0 + np.log(counts)) * self.idf[ids]
        else:
            w *= counts
        keep = w > 0
        rows, ids, w = rows[keep], ids[keep], w[keep]
        totals = np.bincount(rows, weights=w, minlength=n)
        w /= totals[rows]
        out_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=n), out=out_ptr[1:])
        return w, ids, out_ptr

    def weight_matrix(self, texts: list[str]) -> sp.csr_matrix:
        """texts × vocabulary: `encode(texts)` before normalisation is this matrix times the table."""
        data, ids, indptr = self.weighted_tokens(texts)
        return sp.csr_matrix((data.astype(np.float32), ids, indptr), shape=(len(texts), self.config.vocab_size))

    def encode(self, texts: list[str]) -> np.ndarray:
        """`weight_matrix(texts) @ table`, L2-normalised: one tokenizer call and one sparse × dense product in C,
        no loop over tokens and no gathered copy of the rows (a one-text request takes microseconds past the
        tokenizer; np.add.reduceat over gathered rows was several times slower)."""
        out = np.asarray(self.weight_matrix(texts) @ self.table, dtype=np.float32)
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.tokenizer.save(str(folder / TOKENIZER))
        np.save(folder / TABLE, self.table.astype(np.float16))
        np.save(folder / WEIGHTS, self.weights)
        np.save(folder / IDF, self.idf)
        (folder / CONFIG).write_text(self.config.model_dump_json(indent=2))

    @classmethod
    def load(cls, folder: Path) -> StaticEncoder:
        """Raises an XtagError naming the file at fault when one is missing, truncated or inconsistent."""
        with reading(folder / CONFIG, "the static encoder's configuration"):
            config = StaticEncoderConfig.model_validate_json((folder / CONFIG).read_text())
        try:
            tokenizer = Tokenizer.from_file(str(folder / TOKENIZER))
        except Exception as exc:  # tokenizers raises a plain Exception for unreadable files
            raise XtagError(f"{folder / TOKENIZER}: cannot read the tokenizer ({exc})") from exc
        arrays = []
        for name in (TABLE, WEIGHTS, IDF):
            with reading(folder / name, "the static encoder's arrays"):
                arrays.append(np.load(folder / name, allow_pickle=False))
        if tokenizer.get_vocab_size() != config.vocab_size:
            raise XtagError(
                f"{folder / TOKENIZER}: vocabulary of {tokenizer.get_vocab_size()} tokens, table has {config.vocab_size}"
            )
        ids = tokenizer.get_vocab(with_added_tokens=True)  # a token id past the table would wrap to another row
        if ids and max(ids.values()) >= config.vocab_size:
            token = max(ids, key=ids.get)
            raise XtagError(
                f"{folder / TOKENIZER}: token {token!r} has id {ids[token]}, the table has {config.vocab_size} rows"
            )
        for name, array in zip((WEIGHTS, IDF), arrays[1:]):
            if array.size and float(array.min()) < 0:  # NaN passes here: the bundle's NaN scan refuses it
                raise XtagError(f"{folder / name}: a token's weight is {float(array.min())}; none is negative")
        return cls(tokenizer, *arrays, config)
