"""How every transformer family's run ends, and what it leaves for `xtag export`.

`finish_run` is the tail the three trainers share: leave the process group, describe the encoder (xtag's
encoder config) and draw the sample texts the export checks parity on. `save_encoder_folder` writes the
run's model/encoder/ (the Hugging Face transformer, tokenizer, encoder config, sample texts and, for the
nets trained end to end, their heads and shape); `NetRunResult` is the finished run of such a net
(LightXML, CascadeXML), told by its family's `NetKind` what differs, and `NetKind.load_run_net` reads
the folder back for the export.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safetensors.torch import load_file, save_file
from torch import nn
from xtag.models.families import RunResult
from xtag.models.features.onnx_encoder import EncoderConfig, Pooling, TextTokenizer
from xtag.models.label_tree import ClusterChain
from xtag.training.deep.config import TransformerConfig
from xtag.training.deep.distributed import DistContext

SAMPLE_TEXTS = 256  # training texts kept with a run for the export's parity (and XR-Transformer's recall) checks
HEADS_FILE = "heads.safetensors"


def finish_run(
    ctx: DistContext,
    tc: TransformerConfig,
    texts: list[str],
    dim: int,
    pooling: Pooling = "cls",
    features: str = "dense",
) -> tuple[EncoderConfig, list[str]]:
    """Rank 0's end of a transformer run: close the process group; the encoder config of what it trained and
    the sample texts (a seeded draw from the training texts) that its encoder folder keeps."""
    ctx.close()
    config = EncoderConfig(
        max_length=tc.max_length, pooling=pooling, features=features, dim=dim, source=str(tc.encoder)
    )
    return config, random.Random(tc.seed).sample(texts, min(SAMPLE_TEXTS, len(texts)))


def save_encoder_folder(
    folder: Path,
    net: nn.Module,
    tokenizer: TextTokenizer,
    encoder_config: EncoderConfig,
    samples: list[str],
    shape: tuple[str, dict] | None = None,
) -> None:
    """The `encoder/` folder a finished transformer run leaves for export: `net.transformer` as a Hugging Face
    directory, its tokenizer, xtag's encoder config and the sample texts; with `shape` (file name, the net's
    constructor arguments) also the net's heads (everything but the transformer) and that file."""
    folder.mkdir(parents=True, exist_ok=True)
    net.transformer.save_pretrained(str(folder), safe_serialization=True)
    tokenizer.tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "xtag_encoder.json").write_text(encoder_config.model_dump_json(indent=2))
    (folder / "sample_texts.json").write_text(json.dumps(samples, ensure_ascii=False))
    if shape is not None:
        heads = {k: v.detach().contiguous() for k, v in net.state_dict().items() if not k.startswith("transformer.")}
        save_file(heads, str(folder / HEADS_FILE))
        (folder / shape[0]).write_text(json.dumps(shape[1]))


@dataclass(frozen=True)
class NetKind:
    """What differs between the finished runs of the nets trained end to end (one per family)."""

    shape_file: str  # the net's constructor arguments, in the run's encoder folder
    net: Callable[..., nn.Module]  # the net, built as net(transformer, **shape)
    shape: Callable[[nn.Module], dict]  # those arguments, read from a net
    model: Callable[[nn.Module, ClusterChain, Any], Any]  # the served numpy model of the net's weights
    facts: Callable[[nn.Module, Any], dict]  # what the run's summary says of the net (and its head config)

    def load_run_net(self, run_encoder: Path, attn_implementation: str | None = "eager") -> tuple[nn.Module, Any]:
        """The trained torch net of a run's model/encoder (eval mode) and its encoder config."""
        from xtag.training.deep.encoder import load_trained

        encoder, config = load_trained(run_encoder, attn_implementation)
        net = self.net(encoder.transformer, **json.loads((run_encoder / self.shape_file).read_text()))
        missing, unexpected = net.load_state_dict(load_file(str(run_encoder / HEADS_FILE)), strict=False)
        if unexpected or any(not k.startswith("transformer.") for k in missing):
            raise ValueError(f"{run_encoder / HEADS_FILE}: missing {missing}, unexpected {unexpected}")
        return net.eval(), config


@dataclass
class NetRunResult(RunResult):
    """A finished run of a net trained end to end: the numpy model it serves with (`model`), and the torch net,
    tokenizer and sample texts the export reads from its encoder folder."""

    kind: NetKind
    net: nn.Module
    chain: ClusterChain
    tokenizer: TextTokenizer
    encoder_config: EncoderConfig
    head_config: Any
    sample_texts: list[str]
    stats: dict

    @property
    def model(self) -> Any:
        return self.kind.model(self.net, self.chain, self.head_config)

    def save(self, folder: Path) -> None:
        self.model.save(folder)
        shape = (self.kind.shape_file, self.kind.shape(self.net))
        save_encoder_folder(folder / "encoder", self.net, self.tokenizer, self.encoder_config, self.sample_texts, shape)

    def summary(self) -> dict:
        return {**self.kind.facts(self.net, self.head_config), "training": self.stats}
