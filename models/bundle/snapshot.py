"""A server's private, read-only copy of a bundle, which it loads from and maps into memory.

The engine's arrays are memory-mapped (models/engine/layout.py), and a page of a mapped file that is cut short
under a running process is a SIGBUS when it is touched: `truncate -s 128 rankers/engine/fm_w.npy` on a served
bundle killed the server, with no log line (issue 47). No check before use can prevent that (the file can be cut
between the check and the use), and MAP_PRIVATE does not either (a page not yet written is still the file's). So
the server copies the bundle into a directory of its own, owner-only and read-only, verifies the copy (the
manifest's checksums are computed on the copy, so what is served is what was verified) and maps the copy: a
change to the bundle's files never reaches the pages it serves. The workers of one server share one copy (its
directory is named after the server's pid, the manifest's hash and the files' stamps), so they still share the mapped pages.

A copy remembers each source file's size, mtime and inode: `changed()` says which file changed since, so that
the model's readiness can fail with that reason until it is reloaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from xtag.models.bundle.manifest import MANIFEST, bundle_files
from xtag.models.errors import XtagError


def _stamp(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns, st.st_ino


@dataclass(frozen=True)
class Snapshot:
    source: Path  # the bundle as configured
    copy: Path  # the private copy loaded from
    stamps: dict[str, tuple[int, int, int]]  # source file (relative) → (size, mtime_ns, inode) when it was copied

    def changed(self) -> str | None:
        """Why the source no longer holds what was loaded (the first file found changed, or gone), else None."""
        for rel, stamp in self.stamps.items():
            try:
                now = _stamp(self.source / rel)
            except OSError:
                return f"bundle file {rel} is gone from disk since load: reload it"
            if now != stamp:
                return f"bundle file {rel} changed on disk since load: reload it"
        return None

    def discard(self) -> None:
        """Remove the copy (a mapping of it stays valid: the pages live until unmapped)."""
        remove_tree(self.copy)


def remove_tree(folder: Path) -> None:
    """Remove a read-only tree: its directories are made writable again first."""
    if not folder.exists():
        return
    for here, _, _ in os.walk(folder):
        with contextlib.suppress(OSError):
            os.chmod(here, stat.S_IRWXU)
    shutil.rmtree(folder, ignore_errors=True)


def server_root(base: Path, pid: int) -> Path:
    """`base/<pid>`, owner-only, for the copies of the server whose (supervisor's) pid this is; the folders of
    servers that no longer run (killed before they could clean up) are removed on the way."""
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    if base.stat().st_uid != os.getuid() or base.is_symlink():
        raise XtagError(f"{base}: the bundle snapshot directory must be this user's own directory (XTAG_SNAPSHOT_DIR)")
    os.chmod(base, stat.S_IRWXU)
    for entry in base.iterdir():
        if entry.name.isdigit() and int(entry.name) != pid and not _alive(int(entry.name)):
            remove_tree(entry)
    root = base / str(pid)
    root.mkdir(exist_ok=True, mode=0o700)
    return root


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def take_snapshot(source: Path, root: Path) -> Snapshot | None:
    """Copy the bundle at `source` into `root` (read-only files and folders) unless a copy of the same manifest and
    files is there already (another worker of this server made it); the caller loads, and so verifies, the copy.
    None when `source` holds no manifest: nothing is copied, and loading it says why it is not a bundle. The stamps are
    of the files behind a symbolic link: a link switched to another bundle leaves the served files as they were (the
    bundle is changed by a reload, which may be refused while the old one serves on), while a file edited in place is
    a change."""
    source = Path(source).resolve()
    manifest = source / MANIFEST
    if not manifest.is_file():
        return None
    stamps = {rel: _stamp(source / rel) for rel in (*bundle_files(source), MANIFEST)}  # before the copy: see changed
    # The same manifest and the same files (stamps): another worker's copy is this one; a source changed since is
    # copied anew, so that a reload reads the bundle as it is now.
    key = hashlib.sha256(manifest.read_bytes() + repr(sorted(stamps.items())).encode()).hexdigest()[:16]
    copy = root / f"{source.name}-{key}"
    if not copy.is_dir():
        partial = root / f".{copy.name}.{os.getpid()}.tmp"
        remove_tree(partial)
        try:
            shutil.copytree(source, partial, symlinks=True)  # a link inside stays one: the manifest's checks apply
            for here, _, names in os.walk(partial, topdown=False):
                for name in names:
                    if not (Path(here) / name).is_symlink():
                        os.chmod(Path(here) / name, stat.S_IRUSR)
                os.chmod(here, stat.S_IRUSR | stat.S_IXUSR)
            os.rename(partial, copy)
        except OSError as exc:
            remove_tree(partial)
            if not copy.is_dir():  # not another worker's copy that won the rename
                raise XtagError(f"{source}: cannot copy the bundle to serve it privately ({exc})") from exc
    return Snapshot(source, copy, stamps)
