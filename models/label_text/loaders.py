"""The label-text stage's bundle components (XR-Linear's registry entry lists them; optional, so bundles exported
without the stage load as before): the encoder, the label index and the fusion, which wraps the tree's model."""

from __future__ import annotations

from pathlib import Path

from xtag.models.bundle.parts import ComponentType, Parts
from xtag.models.errors import XtagError


def _encoder(path: Path, parts: Parts) -> None:
    from xtag.models.label_text.encoder import LabelTextEncoder

    parts.label_encoder = LabelTextEncoder.load(path)
    parts.placement["label-encoder"] = "cpu"


def _index(path: Path, parts: Parts) -> None:
    from xtag.models.label_text.index import LabelIndex, warm_up

    parts.label_index = LabelIndex.load(path)
    if parts.label_index.info.index == "sparse":
        warm_up()  # its compiled search, before any request
    parts.placement["label-index"] = "cpu"


def _fusion(path: Path, parts: Parts) -> None:
    from xtag.models.label_text.fusion import Fusion, warm_up
    from xtag.models.label_text.model import FusedModel, TextAndFeatures

    tree = parts.need("model", "label-fusion")
    encoder, index = parts.need("label_encoder", "label-fusion"), parts.need("label_index", "label-fusion")
    featurizer = parts.need("featurizer", "label-fusion")
    if isinstance(tree, FusedModel):
        raise XtagError(f"{path}: a second label-text fusion")
    fusion = Fusion.load(path)
    if fusion.trees is not None:
        warm_up()  # its compiled walk, before any request
    parts.model = FusedModel(tree, encoder, index, fusion)
    parts.featurizer = TextAndFeatures(featurizer)


LOADERS: dict[str, ComponentType] = {
    "label-encoder": ComponentType("label_text/encoder", _encoder),
    "label-index": ComponentType("label_text/index", _index),
    "label-fusion": ComponentType("label_text/fusion.json", _fusion),
}
COMPONENTS = tuple(LOADERS)  # in load order, after the tree's rankers
