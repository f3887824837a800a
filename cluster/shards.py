"""The shards of a corpus for distributed scoring: file × line range, the same for the same files whatever the
cluster, so that a rerun finds the outputs of the shards it already finished by their names alone."""

from __future__ import annotations

import glob
import gzip
import os
from dataclasses import dataclass
from pathlib import Path

from xtag.models.errors import XtagError

OUT_FORMATS = ("jsonl", "parquet")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Shard:
    """Lines first..stop-1 of one corpus file (numbered from 1; stop None: to its end) and its output's name."""

    path: str
    first: int
    stop: int | None
    lines: int  # how many lines it covers, for the progress bar
    name: str

    @property
    def span(self) -> tuple[int, int | None]:
        return self.first, self.stop

    def output(self, out: Path, out_format: str) -> Path:
        return out / f"{self.name}.{out_format}"


def count_lines(path: Path) -> int:
    """Lines of a (gzipped) text file, counted on bytes: one pass without decoding."""
    opener = gzip.open if path.suffix == ".gz" else open
    count, last = 0, b"\n"
    with opener(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (last != b"\n")  # a last line without its newline


def corpus_files(pattern: str) -> list[Path]:
    """The files a corpus glob names, sorted; none is a one-line error naming the pattern."""
    files = sorted(Path(p) for p in glob.glob(os.path.expanduser(pattern), recursive=True) if Path(p).is_file())
    if not files:
        raise XtagError(f"--corpus {pattern}: no file matches")
    return files


def _stem(path: Path) -> str:
    name = path.name.removesuffix(".gz")
    return name.rsplit(".", 1)[0] if "." in name else name


def plan_shards(pattern: str, shard_rows: int) -> list[Shard]:
    """Every file of `pattern` cut into runs of `shard_rows` lines; the last shard of a file reads to its end."""
    shards: list[Shard] = []
    seen: dict[str, Path] = {}
    for path in corpus_files(pattern):
        stem = _stem(path)
        if stem in seen:
            raise XtagError(
                f"--corpus {pattern}: {seen[stem]} and {path} would write shards of the same name; rename one"
            )
        seen[stem] = path
        total = count_lines(path)
        for first in range(1, max(total, 1) + 1, shard_rows):
            stop = first + shard_rows if first + shard_rows <= total else None
            last = (stop or total + 1) - 1
            shards.append(Shard(str(path.absolute()), first, stop, last - first + 1, f"{stem}.{first:09d}-{last:09d}"))
    return shards


def unfinished(shards: list[Shard], out: Path, out_format: str) -> list[Shard]:
    """The shards without an output file: a file is only ever there once renamed into place whole."""
    return [s for s in shards if not s.output(out, out_format).exists()]


def clear_partial_writes(out: Path) -> None:
    """Remove the temporary files that workers killed while writing left (never a finished shard's file)."""
    for tmp in out.glob("*.tmp-*"):
        tmp.unlink(missing_ok=True)
