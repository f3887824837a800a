"""CascadeXML's bundle components: the ONNX encoder and the per-level heads; named in the family registry."""

from __future__ import annotations

from pathlib import Path

from xtag.models.bundle.parts import ComponentType, Parts


def _cascadexml_encoder(path: Path, parts: Parts) -> None:
    from xtag.models.cascadexml.model import CascadeXMLEncoder

    parts.featurizer = CascadeXMLEncoder.load(path, device=parts.device, options=parts.options)
    parts.placement["cascadexml-encoder"] = parts.featurizer.onnx.provider


def _cascadexml_heads(path: Path, parts: Parts) -> None:
    from xtag.models.cascadexml.model import CascadeXMLModel

    parts.model = CascadeXMLModel.load_heads(path, parts.need("chain", "cascadexml-heads"))
    parts.placement["cascadexml-heads"] = "cpu"  # the cascade's top-k and gathered dot products, numpy


LOADERS: dict[str, ComponentType] = {
    "cascadexml-encoder": ComponentType("encoder", _cascadexml_encoder),
    "cascadexml-heads": ComponentType("cascadexml", _cascadexml_heads),
}
