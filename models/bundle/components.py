"""A bundle's components: the typed parts (featuriser, encoder, tree, rankers, ...) a predictor is built from.

The manifest lists them in load order as {"type", "path"}; each lives in its own file or folder with its
own small config (for instance rankers/config.json), and each type has one loader that adds its part to
what the earlier components built (the sentence-transformers modules.json idea, with types from this
table instead of class paths from the bundle, so a bundle can name no code). The loaders every family
shares are here; a family's own live in its folder (models/<family>/loaders.py), named by its registry
entry's `loaders`, and import their family's inference code when called: loading a TF-IDF bundle never
imports onnxruntime.
"""

from __future__ import annotations

from pathlib import Path

from xtag.models.bundle.parts import ComponentType, Parts
from xtag.models.errors import reading
from xtag.models.families import FAMILIES
from xtag.models.inference.calibration import CALIBRATION_FILE, Calibration
from xtag.models.label_tree import ClusterChain


def _tfidf(path: Path, parts: Parts) -> None:
    from xtag.models.features.tfidf import TfidfFeaturizer

    parts.featurizer = TfidfFeaturizer.load(path)


def _label_tree(path: Path, parts: Parts) -> None:
    parts.chain = ClusterChain.load_tree(path)


def _calibration(path: Path, parts: Parts) -> None:
    parts.calibration = Calibration.load(path)


COMPONENTS: dict[str, ComponentType] = {
    "tfidf": ComponentType("features/tfidf", _tfidf),
    "label-tree": ComponentType("tree", _label_tree),
    **{kind: entry for f in FAMILIES.values() for kind, entry in f.resolve("loaders").items()},
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
