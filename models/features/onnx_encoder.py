"""Torch-free text encoder: `tokenizers` + onnxruntime, pooled as the bundle's encoder/config.json says.

The tokenisation helper here is also what training feeds the torch encoder with, so training and
serving split text into exactly the same token ids.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator
from tokenizers import Tokenizer
from xtag.models.errors import XtagError
from xtag.models.features.device import CPU, Device, RuntimeOptions
from xtag.models.inference.stopping import check
from xtag.models.threads import thread_count

Pooling = Literal["mean", "cls"]
Representation = Literal["tfidf+dense", "dense"]
Precision = Literal["fp32", "int8", "fp16"]
# Texts per forward: 2 CPU cores gain nothing past 32; the GPU figure is a default, not a measurement.
BATCH_SIZE = {"cpu": 32, "cuda": 128}


class EncoderConfig(BaseModel):
    """encoder/config.json: how to tokenise, run and pool (written by training, read by serving)."""

    model_config = ConfigDict(extra="forbid")

    max_length: int = Field(128, ge=2, description="tokens per text, special tokens included")
    pooling: Pooling = "mean"
    features: Representation = Field("tfidf+dense", description="Φ_cat (eq. 10) or the embedding alone")
    dim: int = Field(..., ge=1, description="embedding size")
    source: str = Field("", description="the pre-trained model the encoder started from")
    opset: int | None = Field(None, description="ONNX opset of model.onnx (set by export)")
    quantized: bool = Field(False, description="model.onnx holds dynamic int8 weights (precision int8)")
    precision: Precision = Field("fp32", description="weights of model.onnx: fp32, dynamic int8 (CPU) or fp16 (GPU)")
    optimized: bool = Field(False, description="model.onnx went through onnxruntime's transformer fusions")

    @model_validator(mode="after")
    def _legacy_quantized(self) -> EncoderConfig:
        """Bundles from before `precision` say int8 only through `quantized`; keep the two in step."""
        if self.quantized and self.precision == "fp32":
            self.precision = "int8"
        self.quantized = self.precision == "int8"
        return self


class TextTokenizer:
    """Truncating, padding batch tokeniser over a `tokenizers` tokenizer.json."""

    def __init__(self, tokenizer: Tokenizer, max_length: int):
        self.tokenizer, self.max_length = tokenizer, max_length
        pad_id = tokenizer.token_to_id("[PAD]")
        if pad_id is None:
            pad_id = tokenizer.token_to_id("<pad>") or 0
        self.pad_id = int(pad_id)
        tokenizer.enable_truncation(max_length)
        tokenizer.no_padding()  # padding is done here, per batch, to the longest text

    @classmethod
    def load(cls, path: Path, max_length: int) -> TextTokenizer:
        try:
            return cls(Tokenizer.from_file(str(path)), max_length)
        except Exception as exc:  # tokenizers raises a plain Exception for unreadable files
            raise XtagError(f"{path}: cannot read the tokenizer ({exc})") from exc

    def _ids(self, texts: list[str]) -> list[list[int]]:
        """Each text's token ids, truncated: `tokenizers`' batch encoder in Rust (its threads), without the
        offsets and word ids where the library offers that (encode_batch_fast: about a third faster)."""
        encode = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)
        return [e.ids for e in encode(list(texts))]

    def lengths(self, texts: list[str]) -> np.ndarray:
        return np.fromiter(map(len, self._ids(texts)), dtype=np.int64, count=len(texts))

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(input_ids, attention_mask, token counts) of all `texts`, padded to the longest: one call into Rust
        and numpy scatters, no Python loop per text (the batch path's tokenizer cost was the loop's)."""
        ids = self._ids(texts)
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        width = max(int(lengths.max(initial=0)), 1)
        mask = np.arange(width)[None, :] < lengths[:, None]
        padded = np.full((len(ids), width), self.pad_id, dtype=np.int64)
        padded[mask] = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum()))
        return padded, mask.astype(np.int64), lengths

    def __call__(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(input_ids, attention_mask) as int64 arrays padded to the batch's longest text."""
        ids, mask, _ = self.encode(texts)
        return ids, mask

    def batches(self, texts: list[str], batch_size: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """(text indices, input_ids, attention_mask) per forward: the texts tokenized once, then cut into
        batches of similar length (`length_sorted_batches`), each padded to its own longest; up to
        `batch_size` texts are one batch in their own order."""
        ids, mask, lengths = self.encode(texts)
        if len(texts) <= batch_size:
            yield np.arange(len(texts)), ids, mask
            return
        for idx in length_sorted_batches(lengths, batch_size):
            width = max(int(lengths[idx].max()), 1)
            yield idx, ids[idx, :width], mask[idx, :width]


def pool_numpy(hidden: np.ndarray, mask: np.ndarray, pooling: Pooling) -> np.ndarray:
    """Mean over real tokens, or the first ([CLS]) token: the same pooling as models/encoder.py."""
    if pooling == "cls":
        return hidden[:, 0].astype(np.float32)
    w = mask[..., None].astype(np.float32)
    return ((hidden * w).sum(axis=1) / np.maximum(w.sum(axis=1), 1e-9)).astype(np.float32)


def length_sorted_batches(lengths: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Index batches of similar length: padding, not text, would otherwise dominate the cost."""
    order = np.argsort(-lengths, kind="stable")
    return [order[lo : lo + batch_size] for lo in range(0, len(order), batch_size)]


class OnnxEncoder:
    """Pooled sentence embeddings from encoder/model.onnx; onnxruntime + numpy only."""

    def __init__(
        self, session, tokenizer: TextTokenizer, config: EncoderConfig, batch_size: int = 32, device: Device = CPU
    ):
        self.session, self.tokenizer, self.config, self.batch_size = session, tokenizer, config, batch_size
        self.device = device
        self.input_names = {i.name for i in session.get_inputs()}

    @property
    def dim(self) -> int:
        return self.config.dim

    @property
    def provider(self) -> str:
        """The execution provider that runs the graph (the first of the session's list)."""
        return self.session.get_providers()[0]

    @classmethod
    def load(
        cls,
        folder: Path,
        threads: int | None = None,
        device: Device | str | None = None,
        batch_size: int | None = None,
        spin: bool = True,
        options: RuntimeOptions | None = None,
    ) -> OnnxEncoder:
        """The encoder in `folder` on `device` (default cpu); CUDA that cannot start raises, never falls back.
        spin=False: its threads sleep as soon as a run ends instead of spinning (onnxruntime's default), for a
        session that runs right after another one on the same cores (a re-ranker behind an encoder).
        `options`: the settings' thread count (unless `threads` is given) and TensorRT engine cache."""
        import onnxruntime as ort

        device = Device.parse(device)
        try:
            config = EncoderConfig.model_validate_json((folder / "config.json").read_text())
        except (OSError, ValueError) as exc:
            raise XtagError(f"{folder}: cannot read the encoder config ({exc})") from exc
        if not (folder / "model.onnx").is_file():
            raise XtagError(f"{folder}: no model.onnx (export the run to get an ONNX encoder)")
        runtime = options or RuntimeOptions()
        session_options = ort.SessionOptions()
        session_options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # onnxruntime's own default is the host's cores, not this process's share (xtag.models.threads)
        session_options.intra_op_num_threads = threads or runtime.encoder_threads or thread_count()
        if not spin:
            session_options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        providers = device.providers(runtime.tensorrt_cache)
        try:
            session = ort.InferenceSession(str(folder / "model.onnx"), session_options, providers=providers)
        except Exception as exc:  # onnxruntime raises its own exception types
            raise XtagError(f"{folder}/model.onnx: onnxruntime cannot load it ({exc})") from exc
        device.check_session(session, f"{folder}/model.onnx")
        tokenizer = TextTokenizer.load(folder / "tokenizer.json", config.max_length)
        return cls(session, tokenizer, config, batch_size or BATCH_SIZE[device.kind], device)

    def forward(
        self, output_names: list[str], ids: np.ndarray, mask: np.ndarray, extra: dict[str, np.ndarray] | None = None
    ) -> list[np.ndarray]:
        """The graph's `output_names` for one padded batch, as host arrays (`extra`: the inputs of graphs that
        read more than text, such as LaMP's candidates). On CUDA through an IO binding: inputs are copied to
        the device once and outputs land in device memory, then come back in one copy."""
        feeds = {"input_ids": ids, "attention_mask": mask, **(extra or {})}
        if "token_type_ids" in self.input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        if not self.device.is_cuda:
            return self.session.run(output_names, feeds)
        binding = self.session.io_binding()
        for name, value in feeds.items():
            binding.bind_cpu_input(name, value)
        for name in output_names:
            binding.bind_output(name, "cuda", self.device.index)
        self.session.run_with_iobinding(binding)
        return binding.copy_outputs_to_cpu()

    def _run(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        hidden = self.forward(["last_hidden_state"], ids, mask)[0]
        return pool_numpy(hidden, mask, self.config.pooling)

    def encode(self, texts: list[str]) -> np.ndarray:
        """n × dim float32 embeddings (not normalised), in the order of `texts`."""
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for idx, ids, mask in self.tokenizer.batches(texts, self.batch_size):
            check()  # between two batches, a call nobody waits for stops (models/inference/stopping.py)
            out[idx] = self._run(ids, mask)
        return out


class GraphOutputsEncoder(ABC):
    """Texts → the named outputs of a family's own encoder/model.onnx (LightXML's heads, CascadeXML's resolutions),
    length-batched and returned in the order of `texts`. A family subclasses it with `check_outputs` (the output
    names its graph must return) and `wrap` (the record its model reads)."""

    tfidf = None  # the Featurizer contract (models/inference/predictor.py): no TF-IDF block
    encodes = True
    dim = None  # named outputs, not a feature matrix

    def __init__(self, onnx: OnnxEncoder, names: list[str]):
        self.onnx, self.names = onnx, names
        self.batch_size = onnx.batch_size

    @classmethod
    @abstractmethod
    def check_outputs(cls, folder: Path, names: list[str]) -> None:
        """Raise XtagError when `names` are not what this family's graph returns."""

    @classmethod
    @abstractmethod
    def wrap(cls, arrays: list[np.ndarray]):
        """The family's outputs record, from the arrays in `names` order."""

    @classmethod
    def load(cls, folder: Path, *args, **kwargs):
        """The family's graph in `folder` (OnnxEncoder.load's arguments: threads, device, options), its outputs
        checked."""
        onnx = OnnxEncoder.load(folder, *args, **kwargs)
        names = [o.name for o in onnx.session.get_outputs()]
        cls.check_outputs(folder, names)
        return cls(onnx, names)

    def outputs(self, texts: list[str]) -> list[np.ndarray]:
        """Each output for all `texts` (n rows each), in their order."""
        texts = list(texts)
        parts, rows = [], []
        for idx, ids, mask in self.onnx.tokenizer.batches(texts, self.batch_size):
            if len(texts) > self.batch_size:
                check()  # between two batches, a call nobody waits for stops (models/inference/stopping.py)
            rows.append(idx)
            parts.append(self.onnx.forward(self.names, ids, mask))
        if len(parts) == 1:
            return parts[0]
        order = np.argsort(np.concatenate(rows))
        return [np.vstack([p[r] for p in parts])[order] for r in range(len(self.names))]

    def transform(self, texts: list[str]):
        return self.wrap(self.outputs(texts))
