"""LightXML's bundle components: the ONNX encoder and the per-cluster heads; named in the family registry."""

from __future__ import annotations

from pathlib import Path

from xtag.models.bundle.parts import ComponentType, Parts


def _lightxml_encoder(path: Path, parts: Parts) -> None:
    from xtag.models.lightxml.model import LightXMLEncoder

    parts.featurizer = LightXMLEncoder.load(path, device=parts.device, options=parts.options)
    parts.placement["lightxml-encoder"] = parts.featurizer.onnx.provider


def _lightxml_heads(path: Path, parts: Parts) -> None:
    from xtag.models.lightxml.model import LightXMLModel

    parts.model = LightXMLModel.load_heads(path, parts.need("chain", "lightxml-heads"))
    parts.placement["lightxml-heads"] = "cpu"  # gathered dot products over the top clusters' labels


LOADERS: dict[str, ComponentType] = {
    "lightxml-encoder": ComponentType("encoder", _lightxml_encoder),
    "lightxml-heads": ComponentType("lightxml", _lightxml_heads),
}
