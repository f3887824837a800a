"""XR-Transformer's bundle component: the ONNX text encoder of Φ_cat; named in the family registry."""

from __future__ import annotations

from pathlib import Path

from xtag.models.bundle.parts import ComponentType, Parts


def _text_encoder(path: Path, parts: Parts) -> None:
    """Φ_cat: the ONNX encoder beside the TF-IDF featuriser loaded before it (or alone, when there is none)."""
    from xtag.models.features.onnx_encoder import OnnxEncoder
    from xtag.models.xr_transformer.concat_features import ConcatFeaturizer

    encoder = OnnxEncoder.load(path, device=parts.device, options=parts.options)
    parts.placement["text-encoder"] = encoder.provider
    parts.featurizer = ConcatFeaturizer(parts.featurizer, encoder)


LOADERS: dict[str, ComponentType] = {
    "text-encoder": ComponentType("encoder", _text_encoder),
}
