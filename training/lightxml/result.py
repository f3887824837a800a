"""A finished LightXML run (training/deep/result.py's NetRunResult): how its net's shape is saved, and its served
model (clusters + label embeddings, numpy) read from the net."""

from __future__ import annotations

from xtag.models.label_tree import ClusterChain
from xtag.models.lightxml.model import LightXMLHeadConfig, LightXMLModel
from xtag.training.deep.result import NetKind
from xtag.training.lightxml.net import LightXMLNet


def net_shape(net: LightXMLNet) -> dict:
    return {
        "n_clusters": net.generator.out_features,
        "n_labels": net.label_embeddings.num_embeddings,
        "last_layers": net.last_layers,
        "dropout": net.dropout.p,
        "hidden_dim": net.bottleneck.out_features,
    }


def numpy_model(net: LightXMLNet, chain: ClusterChain, config: LightXMLHeadConfig) -> LightXMLModel:
    return LightXMLModel(chain, net.label_embeddings.weight.detach().cpu().numpy(), config)


LIGHTXML_NET = NetKind("lightxml_net.json", LightXMLNet, net_shape, numpy_model, lambda net, _: {"features": net.width})
