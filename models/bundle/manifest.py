"""The bundle manifest: format version, model kind, components in load order, versions, sha256 of every file.

Format 2 lists the components explicitly; format 1 bundles (written before components existed) are
still read: their components are the model family's, in the family's order, where present on disk,
which is exactly the layout the version-1 writer produced.

A bundle holds exactly the files its manifest lists: loading refuses a file the manifest does not list
(an unlisted labels.json could otherwise be edited at will), a listed path that is absolute, climbs out
with `..` or leads out through a symbolic link, and an array file cut short. The only files tolerated
unlisted are OS junk that no loader ever opens (JUNK: a bundle copied with Finder gains .DS_Store).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import struct
import zipfile
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationError
from xtag.models.bundle.components import COMPONENTS, present
from xtag.models.errors import XtagError
from xtag.models.families import FAMILIES, family
from xtag.models.files.atomic import write_text_atomic
from xtag.models.inference.calibration import CALIBRATION_FILE
from xtag.models.labels import LabelVocab

FORMAT = "xtag-bundle"
FORMAT_VERSION = 2
READS_VERSIONS = (1, 2)
MANIFEST = "manifest.json"
JUNK = frozenset({".DS_Store", "Thumbs.db"})  # written by file managers, read by no loader: neither listed nor refused


class Component(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    type: str
    path: str


class ManifestFields(BaseModel):
    """The fields loading relies on, type-checked; the others (created, versions, training, export, calibration)
    are information for people and kept as written."""

    model_config = ConfigDict(extra="allow", strict=True)

    format: Literal["xtag-bundle"]
    format_version: Literal[1, 2]
    model_kind: str
    name: str | None = None
    components: list[Component] | None = None
    label_count: int | None = None  # written since format 2; checked against labels.json by load_bundle
    files: dict[str, Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]]


def sha256(path: Path) -> str:
    """Streamed in 1 MiB blocks: a 300 MB bundle is hashed without holding it in memory."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def cut_short(path: Path) -> str | None:
    """Why an array file (.npy, .npz, .safetensors) is shorter than its header says, else None. Reads headers
    only: the loaders' own errors on a cut file (BadZipFile, mmap length) name neither file nor bundle."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as fh:
            if path.suffix == ".npz":
                zipfile.ZipFile(fh).close()  # the central directory sits at the end: a cut file has none
            elif path.suffix == ".npy":
                version = np.lib.format.read_magic(fh)
                reader = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
                if version not in reader:
                    return None
                shape, _, dtype = reader[version](fh, max_header_size=1 << 20)
                need = fh.tell() + (0 if dtype.hasobject else int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
                if size < need:
                    return f"{size} bytes, its header needs {need}"
            elif path.suffix == ".safetensors":
                (n,) = struct.unpack("<Q", fh.read(8))
                header = json.loads(fh.read(n))
                ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
                if size < 8 + n + max(ends, default=0):
                    return f"{size} bytes, its header needs {8 + n + max(ends)}"
    except (OSError, ValueError, KeyError, TypeError, IndexError, EOFError, struct.error, zipfile.BadZipFile) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "unknown"


def bundle_files(folder: Path) -> list[str]:
    """Every file below `folder` (relative POSIX paths, sorted) but the manifest and JUNK: what the manifest must
    list. Refuses a symbolic link that leads outside the bundle."""
    root = folder.resolve()
    found = []
    for here, dirs, names in os.walk(folder):
        for name in (*dirs, *names):
            full = Path(here) / name
            rel = full.relative_to(folder).as_posix()
            if full.is_symlink() and not full.resolve().is_relative_to(root):  # its target is not named: a server path
                raise XtagError(f"{folder}: {rel} is a symbolic link that leads outside the bundle")
        found += [(Path(here) / n).relative_to(folder).as_posix() for n in names if n not in JUNK]
    return sorted(f for f in found if f != MANIFEST)


def write_manifest(folder: Path, model_kind: str, name: str, extra: dict | None = None) -> dict:
    """Hash every file under `folder` and write manifest.json beside them, listing the components present.
    Written last (and atomically), so every file a writer produced is listed."""
    files = {rel: sha256(folder / rel) for rel in bundle_files(folder)}
    vocab = LabelVocab.load(folder / "labels.json")
    components = present(folder, family(model_kind).components)
    runtime = (
        {"onnxruntime", "tokenizers", "faiss-cpu"}
        if any(
            c["type"] in ("text-encoder", "lightxml-encoder", "cascadexml-encoder", "shortlist", "lamp-reranker")
            for c in components
        )
        else {"tokenizers"}
        if any(c["type"] == "static-encoder" for c in components)
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
    write_text_atomic(folder / MANIFEST, json.dumps(manifest, indent=2))
    return manifest


def _inside(folder: Path, rel: str, what: str) -> Path:
    """`folder / rel`, refusing absolute paths, `..`, non-canonical spellings (`./a`, `a//b`, which would dodge
    the unlisted-file check) and paths that a symbolic link leads out of the bundle."""
    pure = PurePosixPath(rel) if isinstance(rel, str) else None
    if pure is not None and pure.is_absolute():  # not echoed: it names a place on the server, not in the bundle
        raise XtagError(f"{folder}: manifest {what} path is absolute, not a relative path inside the bundle")
    if pure is None or ".." in pure.parts or str(pure) != rel or rel in ("", "."):
        raise XtagError(f"{folder}: manifest {what} path {rel!r} is not a relative path inside the bundle")
    path = folder / rel
    if not path.resolve().is_relative_to(folder.resolve()):
        raise XtagError(f"{folder}: manifest {what} path {rel!r} leads outside the bundle (symbolic link)")
    return path


def _components(folder: Path, fields: ManifestFields) -> list[dict[str, str]]:
    """The components to load, in order: listed (format 2) or the family's present ones (format 1)."""
    if fields.format_version == 1:
        return present(folder, FAMILIES[fields.model_kind].components)
    if not fields.components:
        raise XtagError(f"{folder}: manifest 'components' must be a non-empty list of {{type, path}}")
    for entry in fields.components:
        if entry.type not in COMPONENTS:
            raise XtagError(f"{folder}: manifest component {entry.type!r} is not one of {', '.join(COMPONENTS)}")
        if not _inside(folder, entry.path, "component").exists():
            raise XtagError(f"{folder}: component {entry.type} at {entry.path} is missing")
    return [entry.model_dump() for entry in fields.components]


def _fields(path: Path, manifest: object) -> ManifestFields:
    """The manifest's typed fields, or an XtagError naming the manifest and each malformed field."""
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise XtagError(f"{path}: not an xtag bundle manifest")
    version = manifest.get("format_version")
    if type(version) is not int or version not in READS_VERSIONS:
        raise XtagError(
            f"{path.parent}: bundle format version {version!r} is not supported "
            f"by this xtag (reads versions {', '.join(map(str, READS_VERSIONS))}); re-export the run "
            f"with this version"
        )
    try:
        fields = ManifestFields.model_validate(manifest)
    except ValidationError as exc:
        wrong = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5])
        raise XtagError(f"{path}: malformed manifest ({wrong})") from exc
    if fields.model_kind not in FAMILIES:
        raise XtagError(f"{path.parent}: unknown model kind {fields.model_kind!r}")
    return fields


def _unlisted(folder: Path, listed: dict[str, str]) -> None:
    """Refuse files the manifest does not list: nothing checks them, so anything could be put there."""
    extra = [rel for rel in bundle_files(folder) if rel not in listed]
    if not extra:
        return
    hint = (
        f"write {CALIBRATION_FILE} with `xtag calibrate`, which also updates the manifest"
        if CALIBRATION_FILE in extra
        else "remove it, or re-export the bundle"
    )
    raise XtagError(f"{folder}: {', '.join(extra[:5])} not listed in the manifest (no checksum); {hint}")


def not_a_bundle(folder: Path) -> str:
    """Why `folder` holds no bundle, saying what to do: a training run (its config.json beside model/ or
    checkpoints/) is exported first, a folder that does not exist is said not to."""
    if not folder.exists():
        return "no such bundle directory"
    if not folder.is_dir():
        return "not a directory (a bundle is a directory with a manifest.json)"
    if (folder / "config.json").is_file() and ((folder / "model").is_dir() or (folder / "checkpoints").is_dir()):
        if not (folder / "model").is_dir():
            return (
                "a training run that has not finished (no model/), not a bundle: resume its training "
                f"(`xtag train ... --out {folder} --resume`), then export it"
            )
        return f"a training run, not a bundle: export it first with `xtag export {folder} --out bundles/{folder.name}`"
    return f"not an xtag bundle (no {MANIFEST})"


def read_manifest(folder: Path) -> dict:
    """Parse and verify a bundle's manifest (format, version, kind, field types, paths, every file listed and
    its checksum, array files whole); returns it with its components resolved (format 1 bundles get the list
    their writer implied)."""
    path = folder / MANIFEST
    if not path.is_file():
        raise XtagError(f"{folder}: {not_a_bundle(folder)}")
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise XtagError(f"{path}: manifest is not valid JSON ({exc})") from exc
    fields = _fields(path, manifest)
    files = {rel: _inside(folder, rel, "file") for rel in fields.files}
    _unlisted(folder, fields.files)
    for rel, file in files.items():
        if not file.is_file():
            raise XtagError(f"{folder}: file {rel} listed in the manifest is missing")
        if sha256(file) != fields.files[rel]:
            raise XtagError(f"{folder}: checksum mismatch for {rel}: the bundle was modified or corrupted")
        why = cut_short(file)
        if why:
            raise XtagError(f"{folder}: {rel} is truncated or malformed ({why})")
    manifest["components"] = _components(folder, fields)
    return manifest
