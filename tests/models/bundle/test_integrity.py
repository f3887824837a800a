"""A bundle loads only as exported: every file listed with its checksum, paths inside it, a well-formed manifest
and whole array files; anything else is refused with a message naming the file or field at fault."""

import json
import shutil

import numpy as np
import pytest
from xtag.models.bundle.loader import load_bundle
from xtag.models.bundle.manifest import sha256
from xtag.models.errors import XtagError


@pytest.fixture
def bundle(tiny_bundle, tmp_path):
    target = tmp_path / "b"
    shutil.copytree(tiny_bundle, target)
    return target


def edit_manifest(bundle, change):
    manifest = json.loads((bundle / "manifest.json").read_text())
    change(manifest)
    (bundle / "manifest.json").write_text(json.dumps(manifest))


def test_unlisted_edited_file_is_refused(bundle):
    """Dropping labels.json from the manifest used to exempt it from any check: the server served HACKED::."""
    edit_manifest(bundle, lambda m: m["files"].pop("labels.json"))
    labels = json.loads((bundle / "labels.json").read_text())
    (bundle / "labels.json").write_text(json.dumps(json.loads(json.dumps(labels).replace('"game::', '"HACKED::'))))
    with pytest.raises(XtagError, match=r"labels\.json not listed in the manifest"):
        load_bundle(bundle)


def test_unlisted_new_file_is_refused_but_os_junk_is_tolerated(bundle):
    (bundle / "rankers" / "notes.txt").write_text("hello")
    with pytest.raises(XtagError, match=r"rankers/notes\.txt not listed in the manifest"):
        load_bundle(bundle)
    (bundle / "rankers" / "notes.txt").unlink()
    (bundle / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    (bundle / "rankers" / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    assert load_bundle(bundle).predictor.model.n_labels == 12


@pytest.mark.parametrize(
    "path",
    ["/etc/hostname", "../outside.json", "rankers/../../outside.json", "./labels.json", "link.json"],
    ids=["absolute", "dotdot", "nested-dotdot", "non-canonical", "symlink-out"],
)
def test_paths_must_stay_inside_the_bundle(bundle, tmp_path, path):
    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    (bundle / "link.json").symlink_to(outside)
    target = {"link.json": outside}.get(path, bundle / path)
    digest = sha256(target) if target.is_file() else "0" * 64
    edit_manifest(bundle, lambda m: m["files"].update({path: digest}))
    with pytest.raises(XtagError, match="inside the bundle|outside the bundle"):
        load_bundle(bundle)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda m: m.update(files=sorted(m["files"])), "files"),
        (lambda m: m["files"].update({"labels.json": 12345}), r"files\.labels\.json"),
        (lambda m: m.update(model_kind=["xlinear"]), "model_kind"),
        (lambda m: m.update(components="tfidf"), "components"),
        (lambda m: m["components"][0].pop("path"), r"components\.0\.path"),
        (lambda m: m.update(name=5), "name"),
    ],
    ids=["files-list", "digest-int", "kind-list", "components-str", "component-no-path", "name-int"],
)
def test_malformed_manifest_fields_are_named(bundle, change, field):
    edit_manifest(bundle, change)
    with pytest.raises(XtagError, match=rf"manifest\.json: malformed manifest \({field}: "):
        load_bundle(bundle)


@pytest.mark.parametrize(
    "rel", ["rankers/level_2.npz", "tree/chain.npz", "rankers/engine/table.npy", "features/tfidf/idf.npy"]
)
def test_truncated_file_is_named_even_when_its_checksum_was_updated(bundle, rel):
    """A bundle whose manifest was rewritten over a cut file (so the checksum matches) still names the file,
    instead of numpy's BadZipFile or mmap error."""
    data = (bundle / rel).read_bytes()
    (bundle / rel).write_bytes(data[: len(data) // 2])
    edit_manifest(bundle, lambda m: m["files"].update({rel: sha256(bundle / rel)}))
    with pytest.raises(XtagError, match=rel.replace(".", r"\.")):
        load_bundle(bundle)


def test_cut_short_reads_npy_npz_and_safetensors_headers(tmp_path):
    from safetensors.numpy import save_file
    from xtag.models.bundle.manifest import cut_short

    np.save(tmp_path / "a.npy", np.arange(1000))
    np.savez(tmp_path / "a.npz", x=np.arange(1000))
    save_file({"x": np.arange(1000)}, str(tmp_path / "a.safetensors"))
    for name in ("a.npy", "a.npz", "a.safetensors"):
        path = tmp_path / name
        assert cut_short(path) is None
        path.write_bytes(path.read_bytes()[:-100])
        assert cut_short(path), name
