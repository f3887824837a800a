"""Batch scoring on Ray against the local command (issue 40): debdeps TEST repeated to N texts, scored three ways
in one run: `xtag predict --corpus` on one file (the engine on numba's 2 threads), `xtag predict --ray` on a local
cluster of 1 node of 2 CPUs and on 2 nodes of 1 CPU: 2 actors of one engine thread each, the same 2 cores.

    .venv/bin/python -m bench.ray_scoring --bundle bundles/debdeps-xl --texts 1000000   # → results/ray_scoring_1000k.json

Reports docs/s, the peak RSS of every process (the driver, each actor: VmHWM sampled from /proc), and whether each
text's top 10 (and its whole row) equals the local command's. The corpus is written under --scratch, not in git.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.helpers.results import ROOT, save_result
from tests.ray_support import LocalCluster, local_cluster

XTAG = [sys.executable, "-m", "xtag"]
TEST = Path("/work/shared/data/debdeps/test.jsonl.gz")


def write_corpus(scratch: Path, texts: int, per_file: int) -> tuple[Path, str]:
    """TEST's rows repeated (ids made unique) into gzipped files of `per_file` rows; also their concatenation
    (gzip members concatenated are one valid gzip file), the local command's single input."""
    parts = scratch / "parts"
    parts.mkdir(parents=True, exist_ok=True)
    with gzip.open(TEST, "rt") as fh:
        rows = [json.loads(line) for line in fh]
    repeated = ({**row, "id": f"{row['id']}#{i // len(rows)}"} for i, row in zip(range(texts), itertools.cycle(rows)))
    for n in range(0, texts, per_file):
        lines = "".join(json.dumps(r) + "\n" for r in itertools.islice(repeated, per_file))
        (parts / f"part-{n // per_file:03d}.jsonl.gz").write_bytes(gzip.compress(lines.encode(), compresslevel=1))
    whole = scratch / "all.jsonl.gz"
    with open(whole, "wb") as sink:
        for part in sorted(parts.glob("*.jsonl.gz")):
            sink.write(part.read_bytes())
    return whole, str(parts / "*.jsonl.gz")


def _hwm_mb(pid: int) -> float | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    return next((int(line.split()[1]) / 1024 for line in status.splitlines() if line.startswith("VmHWM:")), None)


def _cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process so far (/proc/PID/stat), which a shared machine's load does not inflate
    as it does wall time."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()[:60]
    except OSError:
        return "?"


def run_sampled(command: list[str], cluster: LocalCluster | None) -> dict:
    """`command` run to its end, timed, with the peak RSS of it and of every task process of the cluster."""
    peaks: dict[int, tuple[str, float]] = {}
    cpu: dict[int, float] = {}
    start, before = time.perf_counter(), os.times()
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            pids = [proc.pid] + [p for n in range(len(cluster.nodes) if cluster else 0) for p in cluster.task_pids(n)]
            for pid in pids:
                mb = _hwm_mb(pid)
                name = _name(pid)  # a worker is ray::IDLE until its actor takes it, then named after it
                if mb is not None and (pid not in peaks or name != "ray::IDLE"):
                    peaks[pid] = (name, mb)
                cpu[pid] = _cpu_s(pid) or cpu.get(pid, 0.0)
            time.sleep(0.3)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = proc.communicate()
    seconds = time.perf_counter() - start
    children = os.times()
    done.set()
    sampler.join()
    if proc.returncode:
        raise RuntimeError(f"{' '.join(command)} failed: {err[-2000:]}")
    driver = peaks.pop(proc.pid, ("driver", None))[1]
    actors = [pid for pid, (name, _) in peaks.items() if name.startswith("ray::MapWorker")]
    workers = sorted((round(peaks[pid][1]), peaks[pid][0]) for pid in actors)
    # exact, from wait(): the only child waited for in between
    driver_cpu = children.children_user + children.children_system - before.children_user - before.children_system
    return {
        "seconds": round(seconds, 1),
        "driver_cpu_s": round(driver_cpu, 1),
        "actors_cpu_s": round(sum(cpu.get(pid, 0.0) for pid in actors), 1),  # sampled: up to 0.3 s short each
        "driver_peak_rss_mb": round(driver or 0),
        "actor_peak_rss_mb": workers,
    }


def _rows(paths: list[Path]):
    for path in paths:
        with open(path) as fh:
            yield from fh


def compare(local: Path, shards: Path) -> dict:
    """Per text: the same id and top-10 label names, and the very same line, as the local command's output."""
    same_top, same_line, texts = 0, 0, 0
    for a, b in itertools.zip_longest(_rows([local]), _rows(sorted(shards.glob("*.jsonl")))):
        texts += 1
        if a is None or b is None:
            continue
        same_line += a == b
        ra, rb = json.loads(a), json.loads(b)
        same_top += ra["id"] == rb["id"] and [x["name"] for x in ra["labels"]] == [x["name"] for x in rb["labels"]]
    return {"texts": texts, "same_top10": same_top, "same_line": same_line}


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, default=ROOT / "bundles" / "debdeps-xl")
    parser.add_argument("--texts", type=int, default=1_000_000)
    parser.add_argument("--per-file", type=int, default=100_000)
    parser.add_argument("--shard-rows", type=int, default=20_000)
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/xtag-ray-scoring"))
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    whole, pattern = write_corpus(args.scratch, args.texts, args.per_file)
    bundle = str(args.bundle.resolve())
    local_out = args.scratch / "local.jsonl"
    runs = {
        "local": run_sampled(
            [*XTAG, "predict", bundle, "--corpus", str(whole), "--out", str(local_out), "--no-progress"], None
        )
    }
    for name, workers, cpus in (("ray_1_node", 0, 2), ("ray_2_workers", 1, 1)):
        out = args.scratch / name
        with local_cluster(workers=workers, cpus=cpus) as cluster:
            ray_args = [
                "--corpus",
                pattern,
                "--out",
                str(out),
                "--ray",
                cluster.address,
                "--shard-rows",
                str(args.shard_rows),
            ]
            runs[name] = run_sampled([*XTAG, "predict", bundle, *ray_args, "--no-progress"], cluster)
        runs[name]["equal_to_local"] = compare(local_out, out)
    for run in runs.values():
        run["docs_per_s"] = round(args.texts / run["seconds"], 1)
        run["time_vs_local"] = round(run["seconds"] / runs["local"]["seconds"], 3)
    payload = {
        "corpus": f"debdeps TEST repeated to {args.texts:,} texts",
        "texts": args.texts,
        "bundle": args.bundle.name,
    }
    save_result(
        f"ray_scoring_{args.texts // 1000}k",
        {**payload, "shard_rows": args.shard_rows, "files": -(-args.texts // args.per_file), "runs": runs},
    )


if __name__ == "__main__":
    main()
