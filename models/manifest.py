"""The bundle manifest: format version, model kind, components in load order, versions, sha256 of every file.

Format 2 lists the components explicitly; format 1 bundles (written before components existed) are
still read: their components are the model family's, in the family's order, where present on disk,
which is exactly the layout the version-1 writer produced.
"""

from __future__ import annotations

import hashlib
import json
import platform
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path, PurePosixPath

from models.components import COMPONENTS, present
from models.errors import XtagError
from models.labels import LabelVocab
from models.registry import FAMILIES, family

FORMAT = "xtag-bundle"
FORMAT_VERSION = 2
READS_VERSIONS = (1, 2)


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
    """Hash every file under `folder` and write manifest.json beside them, listing the components present."""
    files = {
        str(p.relative_to(folder)): sha256(p)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }
    vocab = LabelVocab.load(folder / "labels.json")
    components = present(folder, family(model_kind).components)
    runtime = (
        {"onnxruntime", "tokenizers", "faiss-cpu"}
        if any(c["type"] in ("text-encoder", "lightxml-encoder", "shortlist") for c in components)
        else set()
    )
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "name": name,
        "model_kind": model_kind,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "label_count": len(vocab),
        "components": components,
        "versions": {
            "xtag": _version("xtag"),
            "python": platform.python_version(),
            **{p: _version(p) for p in ("numpy", "scipy", "scikit-learn", *sorted(runtime))},
        },
        "files": files,
        **(extra or {}),
    }
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def _inside(folder: Path, rel: str, what: str) -> Path:
    """`folder / rel`, refusing absolute paths and paths that climb out of the bundle."""
    if not isinstance(rel, str) or PurePosixPath(rel).is_absolute() or ".." in PurePosixPath(rel).parts:
        raise XtagError(f"{folder}: manifest {what} path {rel!r} is not a relative path inside the bundle")
    return folder / rel


def _components(folder: Path, manifest: dict) -> list[dict[str, str]]:
    """The components to load, in order: listed (format 2) or the family's present ones (format 1)."""
    kind = manifest["model_kind"]
    if manifest["format_version"] == 1:
        return present(folder, FAMILIES[kind].components)
    listed = manifest.get("components")
    if not isinstance(listed, list) or not listed:
        raise XtagError(f"{folder}: manifest 'components' must be a non-empty list of {{type, path}}")
    for entry in listed:
        if not isinstance(entry, dict) or entry.get("type") not in COMPONENTS:
            raise XtagError(f"{folder}: manifest component {entry!r} is not one of {', '.join(COMPONENTS)}")
        path = entry.get("path")
        if not (_inside(folder, path, "component").exists()):
            raise XtagError(f"{folder}: component {entry['type']} at {path} is missing")
    return listed


def read_manifest(folder: Path) -> dict:
    """Parse and verify a bundle's manifest (format, version, kind, every file's checksum); returns it with
    its components resolved (format 1 bundles get the list their writer implied)."""
    path = folder / "manifest.json"
    if not path.exists():
        raise XtagError(f"{folder}: not an xtag bundle (no manifest.json)")
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise XtagError(f"{path}: manifest is not valid JSON ({exc.msg})") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise XtagError(f"{path}: not an xtag bundle manifest")
    if manifest.get("format_version") not in READS_VERSIONS:
        raise XtagError(
            f"{folder}: bundle format version {manifest.get('format_version')} is not supported "
            f"by this xtag (reads versions {', '.join(map(str, READS_VERSIONS))}); re-export the run "
            f"with this version"
        )
    if manifest.get("model_kind") not in FAMILIES:
        raise XtagError(f"{folder}: unknown model kind {manifest.get('model_kind')!r}")
    files = manifest.get("files", {})
    if not isinstance(files, dict):
        raise XtagError(f"{path}: 'files' must map relative paths to sha256 digests")
    for rel, digest in files.items():
        file = _inside(folder, rel, "file")
        if not file.is_file():
            raise XtagError(f"{folder}: file {rel} listed in the manifest is missing")
        if sha256(file) != digest:
            raise XtagError(f"{folder}: checksum mismatch for {rel}: the bundle was modified or corrupted")
    manifest["components"] = _components(folder, manifest)
    return manifest
