"""A bundle: a self-describing directory (models/bundle/manifest.py) that loads into a Predictor without torch."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from xtag.models.bundle.components import assemble
from xtag.models.bundle.manifest import not_a_bundle, read_manifest
from xtag.models.errors import XtagError
from xtag.models.features.device import RuntimeOptions
from xtag.models.files.finite_scan import refuse_nonfinite
from xtag.models.inference.predictor import Predictor
from xtag.models.label_texts import LABEL_TEXTS_FILE, LabelTexts
from xtag.models.labels import LabelVocab


@dataclass
class Bundle:
    path: Path
    manifest: dict
    predictor: Predictor
    load_seconds: float
    runtime: dict = field(default_factory=dict)  # {"device", "placement": component → provider or device}

    @property
    def name(self) -> str:
        return self.manifest.get("name", self.path.name)

    @property
    def version(self) -> str:
        """Content id: changes whenever any file of the bundle changes."""
        files = json.dumps(self.manifest["files"], sort_keys=True).encode()
        return hashlib.sha256(files).hexdigest()[:12]


def load_bundle(path: str | Path, device=None, options: RuntimeOptions | None = None) -> Bundle:
    """Verify and load a bundle; raises XtagError with a clear message on any mismatch, unlisted file (an
    unlisted calibration.json included) or unreadable file (models/bundle/manifest.py), on NaN or inf in any of its
    arrays (models/files/finite_scan.py), and on any index or number out of its bounds (each component's loader:
    models/files/index_bounds.py). The one load path: the server, `xtag predict`, `evaluate`, `calibrate` and export's
    check all come here, so a bundle one of them refuses, all refuse. `device`: where its ONNX graphs and
    FAISS indexes run (models/features/device.py; default cpu); CUDA that cannot start raises. `options`: how the encoders
    run (threads, TensorRT cache), from the caller's settings: models/ reads no environment."""
    start = time.perf_counter()
    folder = Path(path)
    if not folder.is_dir():
        raise XtagError(f"{folder}: {not_a_bundle(folder)}")
    manifest = read_manifest(folder)
    nested = tuple(f"{c['path']}/" for c in manifest["components"] if c["type"] == "first-stage")
    own = [rel for rel in manifest["files"] if not rel.startswith(nested)]  # a first stage scans its own on load
    refuse_nonfinite(folder, own, "a corrupt bundle")
    parts = assemble(folder, manifest["components"], device, open_bundle=load_bundle, options=options)
    if parts.featurizer is None or parts.model is None:
        raise XtagError(
            f"{folder}: its components {[c['type'] for c in manifest['components']]} give no featuriser or no model"
        )
    predictor = Predictor(
        featurizer=parts.featurizer,
        model=parts.model,
        vocab=LabelVocab.load(folder / "labels.json"),
        calibration=parts.calibration,
        # a bundle-level file like labels.json, not a component: what labels say, which no predictor part reads
        label_texts=LabelTexts.load(folder / LABEL_TEXTS_FILE) if LABEL_TEXTS_FILE in manifest["files"] else None,
    )
    stated = manifest.get("label_count")
    if stated is not None and stated != len(predictor.vocab):  # a manifest edited, or a labels.json swapped in
        raise XtagError(
            f"{folder}: manifest label_count {stated} disagrees with labels.json, which has {len(predictor.vocab)} "
            "labels; re-export the bundle"
        )
    if predictor.model.n_labels != len(predictor.vocab):
        raise XtagError(f"{folder}: model has {predictor.model.n_labels} labels, labels.json {len(predictor.vocab)}")
    runtime = {"device": str(parts.device), "placement": parts.placement}
    return Bundle(folder, manifest, predictor, time.perf_counter() - start, runtime)
