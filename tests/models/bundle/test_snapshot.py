"""The private read-only copy a server serves a bundle from (models/bundle/snapshot.py), and what it says of a change."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from xtag.models.bundle.loader import load_bundle
from xtag.models.bundle.snapshot import server_root, take_snapshot


def test_the_copy_is_read_only_loads_and_is_shared_until_the_bundle_changes(tiny_bundle, tmp_path):
    source = shutil.copytree(tiny_bundle, tmp_path / "b")
    root = server_root(tmp_path / "copies", os.getpid())
    snap = take_snapshot(source, root)
    assert snap.copy.parent == root and (root.stat().st_mode & 0o777) == 0o700
    files = [p for p in snap.copy.rglob("*") if p.is_file()]
    assert files and all(p.stat().st_mode & 0o777 == 0o400 for p in files)
    assert load_bundle(snap.copy).predictor.n_labels == 12
    assert snap.changed() is None
    assert take_snapshot(source, root).copy == snap.copy  # another worker of the server: the same copy

    engine = next((source / "rankers" / "engine").glob("*.npy"))
    os.truncate(engine, 128)
    assert snap.changed() == f"bundle file rankers/engine/{engine.name} changed on disk since load: reload it"
    assert (snap.copy / "rankers" / "engine" / engine.name).stat().st_size > 128  # the copy is untouched
    assert take_snapshot(source, root).copy != snap.copy  # a reload reads the bundle as it is now
    (source / "labels.json").unlink()
    assert "labels.json is gone from disk since load" in (snap.changed() or "")

    snap.discard()
    assert not snap.copy.exists()


def test_the_copies_of_servers_that_no_longer_run_are_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / "copies" / dead.stdout.strip() / "b-0123"
    stale.mkdir(parents=True)
    (stale / "x.npy").write_bytes(b"x")
    os.chmod(stale / "x.npy", 0o400)
    os.chmod(stale, 0o500)
    root = server_root(tmp_path / "copies", os.getpid())
    assert root.is_dir() and not stale.parent.exists()


def test_a_folder_that_is_no_bundle_is_neither_copied_nor_touched(tmp_path):
    run = tmp_path / "run"
    (run / "model").mkdir(parents=True)
    (run / "config.json").write_text("{}")
    assert take_snapshot(run, server_root(tmp_path / "copies", os.getpid())) is None
    assert (run / "config.json").read_text() == "{}" and (run / "model").is_dir()


def test_a_symbolic_link_switched_to_another_bundle_is_no_change_of_the_served_files(tiny_bundle, tmp_path):
    link = tmp_path / "current"
    link.symlink_to(shutil.copytree(tiny_bundle, tmp_path / "v1"))
    snap = take_snapshot(link, server_root(tmp_path / "copies", os.getpid()))
    link.unlink()
    link.symlink_to(shutil.copytree(tiny_bundle, tmp_path / "v2"))  # a deployment's switch, before its SIGHUP
    assert snap.changed() is None
    (tmp_path / "v1" / "labels.json").write_text("{}")  # but the served files edited in place are a change
    assert snap.changed() == "bundle file labels.json changed on disk since load: reload it"
