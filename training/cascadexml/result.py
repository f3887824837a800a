"""A finished CascadeXML run (training/deep/result.py's NetRunResult): how its net's shape is saved, and its served
model (each resolution's classifier, numpy) read from the net."""

from __future__ import annotations

from xtag.models.cascadexml.model import CascadeHeadConfig, CascadeXMLModel
from xtag.models.label_tree import ClusterChain
from xtag.training.cascadexml.net import CascadeXMLNet
from xtag.training.deep.result import NetKind


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


def _facts(net: CascadeXMLNet, head: CascadeHeadConfig) -> dict:
    return {"resolutions": head.sizes, "layers": net.layers}


CASCADEXML_NET = NetKind("cascadexml_net.json", CascadeXMLNet, net_shape, numpy_model, _facts)
