"""Bundle v1: a self-describing directory (manifest with versions and sha256 of every file) that serves without torch."""

from __future__ import annotations

import hashlib
import json
import platform
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from models.calibration import CALIBRATION_FILE, Calibration
from models.errors import XtagError
from models.features import TfidfFeaturizer
from models.labels import LabelVocab
from models.predictor import Featurizer, Model, Predictor
from models.xlinear import XLinearModel

FORMAT = "xtag-bundle"
FORMAT_VERSION = 1
MODEL_KINDS = ("xlinear", "xr-transformer", "lightxml")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "unknown"


def write_manifest(folder: Path, model_kind: str, name: str, extra: dict | None = None) -> dict:
    """Hash every file under `folder` and write manifest.json beside them."""
    files = {str(p.relative_to(folder)): sha256(p)
             for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "manifest.json"}
    vocab = LabelVocab.load(folder / "labels.json")
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "name": name,
        "model_kind": model_kind,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "label_count": len(vocab),
        "versions": {"xtag": _version("xtag"), "python": platform.python_version(),
                     **{p: _version(p) for p in ("numpy", "scipy", "scikit-learn")},
                     **({p: _version(p) for p in ("onnxruntime", "tokenizers", "faiss-cpu")}
                        if (folder / "encoder").is_dir() or (folder / "shortlist").is_dir() else {})},
        "files": files,
        **(extra or {}),
    }
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def read_manifest(folder: Path) -> dict:
    """Parse and verify a bundle's manifest: format, version and every file's checksum."""
    path = folder / "manifest.json"
    if not path.exists():
        raise XtagError(f"{folder}: not an xtag bundle (no manifest.json)")
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise XtagError(f"{path}: manifest is not valid JSON ({exc.msg})") from exc
    if manifest.get("format") != FORMAT:
        raise XtagError(f"{path}: not an xtag bundle manifest (format={manifest.get('format')!r})")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise XtagError(f"{folder}: bundle format version {manifest.get('format_version')} is not supported "
                        f"by this xtag (reads version {FORMAT_VERSION}); re-export the run with this version")
    if manifest.get("model_kind") not in MODEL_KINDS:
        raise XtagError(f"{folder}: unknown model kind {manifest.get('model_kind')!r}")
    for rel, digest in manifest.get("files", {}).items():
        file = folder / rel
        if not file.is_file():
            raise XtagError(f"{folder}: file {rel} listed in the manifest is missing")
        if sha256(file) != digest:
            raise XtagError(f"{folder}: checksum mismatch for {rel}: the bundle was modified or corrupted")
    return manifest


@dataclass
class Bundle:
    path: Path
    manifest: dict
    predictor: Predictor
    load_seconds: float

    @property
    def name(self) -> str:
        return self.manifest.get("name", self.path.name)

    @property
    def version(self) -> str:
        """Content id: changes whenever any file of the bundle changes."""
        files = json.dumps(self.manifest["files"], sort_keys=True).encode()
        return hashlib.sha256(files).hexdigest()[:12]


def load_featurizer(folder: Path, kind: str) -> Featurizer:
    """TF-IDF for xlinear; Φ_cat (TF-IDF + ONNX encoder, or the encoder alone) for xr-transformer;
    the ONNX graph's cluster scores and bottleneck vectors for lightxml."""
    if kind == "xlinear":
        return TfidfFeaturizer.load(folder / "features" / "tfidf")
    if kind == "lightxml":
        from models.lightxml import LightXMLEncoder

        return LightXMLEncoder.load(folder / "encoder")
    from models.concat_features import ConcatFeaturizer
    from models.onnx_encoder import OnnxEncoder

    encoder = OnnxEncoder.load(folder / "encoder")
    tfidf = (TfidfFeaturizer.load(folder / "features" / "tfidf")
             if encoder.config.features == "tfidf+dense" else None)
    return ConcatFeaturizer(tfidf, encoder)


def load_model(folder: Path, kind: str) -> Model:
    """The rankers (with their FAISS level-1 shortlist when present), or LightXML's clusters and label embeddings."""
    if kind == "lightxml":
        from models.lightxml import LightXMLModel

        return LightXMLModel.load(folder)
    model = XLinearModel.load(folder)
    if (folder / "shortlist").is_dir():
        from models.shortlist import FaissShortlist

        model.first_level = FaissShortlist.load(folder / "shortlist")
    return model


def load_bundle(path: str | Path) -> Bundle:
    """Verify and load a bundle; raises XtagError with a clear message on any mismatch."""
    start = time.perf_counter()
    folder = Path(path)
    if not folder.is_dir():
        raise XtagError(f"{folder}: bundle directory not found")
    manifest = read_manifest(folder)
    model = load_model(folder, manifest["model_kind"])
    calibration = None
    if (folder / CALIBRATION_FILE).exists():  # optional; must be covered by the manifest's checksums
        if CALIBRATION_FILE not in manifest.get("files", {}):
            raise XtagError(f"{folder}: {CALIBRATION_FILE} is not listed in the manifest; write it with "
                            f"`xtag calibrate`, which also updates the manifest")
        calibration = Calibration.load(folder / CALIBRATION_FILE)
    predictor = Predictor(
        featurizer=load_featurizer(folder, manifest["model_kind"]),
        model=model,
        vocab=LabelVocab.load(folder / "labels.json"),
        calibration=calibration,
    )
    if predictor.model.n_labels != len(predictor.vocab):
        raise XtagError(f"{folder}: model has {predictor.model.n_labels} labels, labels.json {len(predictor.vocab)}")
    return Bundle(folder, manifest, predictor, time.perf_counter() - start)
