"""What a finished LightXML run is: its net's heads on disk, the net's shape, and the result the run directory saves."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from xtag.models.label_tree import ClusterChain
from xtag.models.lightxml.model import LightXMLHeadConfig, LightXMLModel
from xtag.models.onnx_encoder import EncoderConfig, TextTokenizer
from xtag.training.deep.checkpoint import save_encoder_folder
from xtag.training.lightxml.net import LightXMLNet


@dataclass
class LightXMLResult:
    """What a finished run saves: clusters + label embeddings (numpy, as served) and the torch net for export."""

    net: LightXMLNet
    chain: ClusterChain
    tokenizer: TextTokenizer
    encoder_config: EncoderConfig
    head_config: LightXMLHeadConfig
    sample_texts: list[str]
    stats: dict

    @property
    def model(self) -> LightXMLModel:
        E = self.net.label_embeddings.weight.detach().cpu().numpy()
        return LightXMLModel(self.chain, E, self.head_config)

    def save(self, folder: Path) -> None:
        self.model.save(folder)
        shape = ("lightxml_net.json", net_shape(self.net))
        save_encoder_folder(folder / "encoder", self.net, self.tokenizer, self.encoder_config, shape, self.sample_texts)

    def summary(self) -> dict:
        return {"features": self.net.width, "training": self.stats}


def net_shape(net: LightXMLNet) -> dict:
    return {
        "n_clusters": net.generator.out_features,
        "n_labels": net.label_embeddings.num_embeddings,
        "last_layers": net.last_layers,
        "dropout": net.dropout.p,
        "hidden_dim": net.bottleneck.out_features,
    }
