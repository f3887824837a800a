"""XR-Linear's bundle components: the rankers, the static-encoder block of Φ_cat and the FAISS level-1 shortlist
(XR-Transformer's bundles use the rankers and the shortlist too), and the label-text stage's; named in the family
registry."""

from __future__ import annotations

from pathlib import Path

from xtag.models.bundle.parts import ComponentType, Parts
from xtag.models.errors import XtagError
from xtag.models.label_text.loaders import LOADERS as LABEL_TEXT_LOADERS


def _static_encoder(path: Path, parts: Parts) -> None:
    """Φ_cat for XR-Linear: static token embeddings (numpy + tokenizers) beside the TF-IDF featuriser before it."""
    from xtag.models.features.static_encoder import StaticEncoder
    from xtag.models.xr_transformer.concat_features import ConcatFeaturizer

    encoder = StaticEncoder.load(path)
    parts.placement["static-encoder"] = "cpu"
    parts.featurizer = ConcatFeaturizer(parts.featurizer, encoder, alpha=encoder.config.alpha)


def _rankers(path: Path, parts: Parts) -> None:
    from xtag.models.xlinear.model import XLinearModel

    parts.model = XLinearModel.load_rankers(path, parts.need("chain", "rankers"))
    featurizer = parts.featurizer  # the Featurizer contract declares its columns (models/inference/predictor.py)
    columns, n_features = None if featurizer is None else featurizer.dim, parts.model.config.n_features
    if columns is not None and columns != n_features:  # else every prediction fails, after /ready said yes
        raise XtagError(
            f"{path / 'config.json'}: n_features {n_features}, the features before it give {columns} columns"
        )
    parts.placement["rankers"] = "cpu"  # the compiled sparse engine: see models/features/device.py for why
    parts.model.prepare()  # the compiled engine's layout and kernels, before any request


def _shortlist(path: Path, parts: Parts) -> None:
    from xtag.models.xlinear.shortlist import FaissShortlist

    model = parts.need("model", "shortlist")
    shortlist = FaissShortlist.load(path, nodes=model.chain.level_size(1), n_features=model.config.n_features)
    model.first_level = shortlist.to_device(parts.device)
    parts.placement["shortlist"] = shortlist.placement


LOADERS: dict[str, ComponentType] = {
    "static-encoder": ComponentType("features/static", _static_encoder),
    "rankers": ComponentType("rankers", _rankers),
    "shortlist": ComponentType("shortlist", _shortlist),
    **LABEL_TEXT_LOADERS,  # the label-text stage over the rankers (models/label_text/), when trained with --labels
}
