"""What a finished CascadeXML run is: the numpy model it serves with and the torch net the export reads."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from models.cascadexml.model import CascadeHeadConfig, CascadeXMLModel
from models.label_tree import ClusterChain
from models.onnx_encoder import EncoderConfig, TextTokenizer
from training.cascadexml.net import CascadeXMLNet
from training.checkpoint import save_heads

SHAPE_FILE = "cascadexml_net.json"


def net_shape(net: CascadeXMLNet) -> dict:
    return {
        "sizes": net.sizes,
        "layers": net.layers,
        "dropouts": [d.p for d in net.dropouts],
        "feature_dropout": net.project[0].p,
    }


def numpy_model(net: CascadeXMLNet, chain: ClusterChain, config: CascadeHeadConfig) -> CascadeXMLModel:
    """The served model of the net's current weights (float32 copies, not views of the parameters)."""
    weights = [e.weight.detach().float().cpu().numpy().copy() for e in net.embeddings]
    biases = [b.weight.detach().float().cpu().numpy()[:, 0].copy() for b in net.biases]
    return CascadeXMLModel(chain, weights, biases, config)


@dataclass
class CascadeXMLResult:
    net: CascadeXMLNet
    chain: ClusterChain
    tokenizer: TextTokenizer
    encoder_config: EncoderConfig
    head_config: CascadeHeadConfig
    sample_texts: list[str]
    stats: dict

    @property
    def model(self) -> CascadeXMLModel:
        return numpy_model(self.net, self.chain, self.head_config)

    def save(self, folder: Path) -> None:
        self.model.save(folder)
        enc = folder / "encoder"
        enc.mkdir(parents=True, exist_ok=True)
        self.net.transformer.save_pretrained(str(enc), safe_serialization=True)
        self.tokenizer.tokenizer.save(str(enc / "tokenizer.json"))
        (enc / "xtag_encoder.json").write_text(self.encoder_config.model_dump_json(indent=2))
        save_heads(self.net, enc)
        (enc / SHAPE_FILE).write_text(json.dumps(net_shape(self.net)))
        (enc / "sample_texts.json").write_text(json.dumps(self.sample_texts, ensure_ascii=False))

    def summary(self) -> dict:
        return {"resolutions": self.head_config.sizes, "layers": self.net.layers, "training": self.stats}
