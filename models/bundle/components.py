"""A bundle's components: the typed parts (featuriser, encoder, tree, rankers, ...) a predictor is built from.

The manifest lists them in load order as {"type", "path"}; each lives in its own file or folder with its
own small config (for instance rankers/config.json), and each type has one loader below that adds its
part to what the earlier components built (the sentence-transformers modules.json idea, with types from
this table instead of class paths from the bundle, so a bundle can name no code). The loaders import
their family's inference code when called: loading a TF-IDF bundle never imports onnxruntime.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xtag.models.errors import XtagError, reading
from xtag.models.inference.calibration import CALIBRATION_FILE, Calibration
from xtag.models.label_tree import ClusterChain


@dataclass
class Parts:
    """What the components loaded so far have built; the Predictor is assembled from it."""

    featurizer: Any = None
    model: Any = None
    chain: ClusterChain | None = None
    calibration: Calibration | None = None
    device: Any = None  # xtag.models.features.device.Device the graphs and indexes go to (None: cpu)
    options: Any = None  # xtag.models.features.device.RuntimeOptions: encoder threads, TensorRT cache (None: defaults)
    placement: dict[str, str] = field(default_factory=dict)  # component type → where it runs (/v1/model says)
    # Loads a bundle nested in this one (a re-ranker's first stage) on the same device with the same options;
    # models/bundle/loader.py's load_bundle, passed in rather than imported, since the bundle module imports this one.
    open_bundle: Callable[[Path, Any, Any], Any] | None = None

    def need(self, what: str, component: str) -> Any:
        value = getattr(self, what)
        if value is None:
            raise XtagError(f"component {component!r} needs a {what} from an earlier component")
        return value


def _tfidf(path: Path, parts: Parts) -> None:
    from xtag.models.features.tfidf import TfidfFeaturizer

    parts.featurizer = TfidfFeaturizer.load(path)


def _text_encoder(path: Path, parts: Parts) -> None:
    """Φ_cat: the ONNX encoder beside the TF-IDF featuriser loaded before it (or alone, when there is none)."""
    from xtag.models.features.onnx_encoder import OnnxEncoder
    from xtag.models.xr_transformer.concat_features import ConcatFeaturizer

    encoder = OnnxEncoder.load(path, device=parts.device, options=parts.options)
    parts.placement["text-encoder"] = encoder.provider
    parts.featurizer = ConcatFeaturizer(parts.featurizer, encoder)


def _static_encoder(path: Path, parts: Parts) -> None:
    """Φ_cat for XR-Linear: static token embeddings (numpy + tokenizers) beside the TF-IDF featuriser before it."""
    from xtag.models.features.static_encoder import StaticEncoder
    from xtag.models.xr_transformer.concat_features import ConcatFeaturizer

    encoder = StaticEncoder.load(path)
    parts.placement["static-encoder"] = "cpu"
    parts.featurizer = ConcatFeaturizer(parts.featurizer, encoder, alpha=encoder.config.alpha)


def _label_tree(path: Path, parts: Parts) -> None:
    parts.chain = ClusterChain.load_tree(path)


def _rankers(path: Path, parts: Parts) -> None:
    from xtag.models.xlinear.model import XLinearModel

    parts.model = XLinearModel.load_rankers(path, parts.need("chain", "rankers"))
    columns, n_features = getattr(parts.featurizer, "dim", None), parts.model.config.n_features
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


def _lightxml_encoder(path: Path, parts: Parts) -> None:
    from xtag.models.lightxml.model import LightXMLEncoder

    parts.featurizer = LightXMLEncoder.load(path, device=parts.device, options=parts.options)
    parts.placement["lightxml-encoder"] = parts.featurizer.onnx.provider


def _lightxml_heads(path: Path, parts: Parts) -> None:
    from xtag.models.lightxml.model import LightXMLModel

    parts.model = LightXMLModel.load_heads(path, parts.need("chain", "lightxml-heads"))
    parts.placement["lightxml-heads"] = "cpu"  # gathered dot products over the top clusters' labels


def _cascadexml_encoder(path: Path, parts: Parts) -> None:
    from xtag.models.cascadexml.model import CascadeXMLEncoder

    parts.featurizer = CascadeXMLEncoder.load(path, device=parts.device, options=parts.options)
    parts.placement["cascadexml-encoder"] = parts.featurizer.onnx.provider


def _cascadexml_heads(path: Path, parts: Parts) -> None:
    from xtag.models.cascadexml.model import CascadeXMLModel

    parts.model = CascadeXMLModel.load_heads(path, parts.need("chain", "cascadexml-heads"))
    parts.placement["cascadexml-heads"] = "cpu"  # the cascade's top-k and gathered dot products, numpy


def _first_stage(path: Path, parts: Parts) -> None:
    """A re-ranker's first stage: a whole bundle (its own manifest verified), loaded as it is."""
    first = parts.need("open_bundle", "first-stage")(path, parts.device, parts.options)
    parts.model = first.predictor
    parts.placement.update({f"first-stage/{k}": v for k, v in first.runtime["placement"].items()})


def _lamp_reranker(path: Path, parts: Parts) -> None:
    from xtag.models.lamp.model import LampModel, LampReranker, Texts

    # Behind a first stage with its own onnxruntime session on the CPU (a transformer encoder), the two sessions'
    # threads take turns on the same cores, and each one's threads spin after its run while the other's works:
    # over XR-Transformer on debtags, with the re-ranker not spinning, a text's p50 fell from 20 to 15 ms
    # (3 rounds each; bench/RESULTS.md). Over XR-Linear the engine runs between them and spinning helps
    # (1.5 against 2.1 ms).
    behind_encoder = any(
        k.startswith("first-stage/") and v == "CPUExecutionProvider" for k, v in parts.placement.items()
    )
    reranker = LampReranker.load(path, device=parts.device, spin=not behind_encoder, options=parts.options)
    parts.model = LampModel(parts.need("model", "lamp-reranker"), reranker)
    parts.featurizer = Texts()
    parts.placement["lamp-reranker"] = reranker.onnx.provider


def _calibration(path: Path, parts: Parts) -> None:
    parts.calibration = Calibration.load(path)


@dataclass(frozen=True)
class ComponentType:
    path: str  # where the exporter writes it, relative to the bundle
    load: Callable[[Path, Parts], None]


COMPONENTS: dict[str, ComponentType] = {
    "tfidf": ComponentType("features/tfidf", _tfidf),
    "text-encoder": ComponentType("encoder", _text_encoder),
    "static-encoder": ComponentType("features/static", _static_encoder),
    "lightxml-encoder": ComponentType("encoder", _lightxml_encoder),
    "label-tree": ComponentType("tree", _label_tree),
    "rankers": ComponentType("rankers", _rankers),
    "shortlist": ComponentType("shortlist", _shortlist),
    "lightxml-heads": ComponentType("lightxml", _lightxml_heads),
    "cascadexml-encoder": ComponentType("encoder", _cascadexml_encoder),
    "cascadexml-heads": ComponentType("cascadexml", _cascadexml_heads),
    "first-stage": ComponentType("first_stage", _first_stage),
    "lamp-reranker": ComponentType("lamp", _lamp_reranker),
    "calibration": ComponentType(CALIBRATION_FILE, _calibration),
}


def present(folder: Path, types: tuple[str, ...]) -> list[dict[str, str]]:
    """The manifest entries of those component types whose file or folder exists in `folder`, in that order."""
    return [
        {"type": t, "path": COMPONENTS[t].path}
        for t in (*types, "calibration")
        if (folder / COMPONENTS[t].path).exists()
    ]


def assemble(folder: Path, components: list[dict[str, str]], device=None, open_bundle=None, options=None) -> Parts:
    """Load each component in order; the manifest's list was checked by models/bundle/manifest.py. A loader's read
    error (numpy, json, onnxruntime's, ...) becomes an XtagError naming the component, unless it names its file.
    `device` (xtag.models.features.device.Device or a spec such as "cuda:0") places the graphs and indexes; default cpu.
    `options` (xtag.models.features.device.RuntimeOptions) sets the encoders' threads and TensorRT cache.
    `open_bundle(path, device, options)` loads a nested bundle (the first-stage component needs it)."""
    from xtag.models.features.device import Device

    parts = Parts(device=Device.parse(device), options=options, open_bundle=open_bundle)
    for entry in components:
        path = folder / entry["path"]
        with reading(path, f"the {entry['type']} component", RuntimeError):
            COMPONENTS[entry["type"]].load(path, parts)
    return parts
