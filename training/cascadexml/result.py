"""What a finished CascadeXML run is: the numpy model it serves with and the torch net the export reads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from xtag.models.cascadexml.model import CascadeHeadConfig, CascadeXMLModel
from xtag.models.label_tree import ClusterChain
from xtag.models.onnx_encoder import EncoderConfig, TextTokenizer
from xtag.training.cascadexml.net import CascadeXMLNet
from xtag.training.deep.checkpoint import save_encoder_folder

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
        shape = (SHAPE_FILE, net_shape(self.net))
        save_encoder_folder(folder / "encoder", self.net, self.tokenizer, self.encoder_config, shape, self.sample_texts)

    def summary(self) -> dict:
        return {"resolutions": self.head_config.sizes, "layers": self.net.layers, "training": self.stats}
