"""Server RSS over reloads: does a refused bundle, or a storm of successful reloads, leave memory behind?

Issue 30's defect 2: each refused reload (a bundle that loads, then fails the NaN scan or the warm-up) kept
about 7 MB of a debtags-sized bundle, and 150 refusals took the server from 507 MB to 1,565 MB. This starts
the server (xtag.service.server.serve, one worker) on --bundle in a subprocess, writes a copy of it whose
float array --poison is all NaN (manifest re-hashed, so only the NaN scan refuses it) and POSTs
/v1/admin/reload to that copy --refusals times, reading the server's RSS from /proc after each.

    .venv/bin/python -m bench.reload_leak --bundle bench/out/xlinear_vs_pecos/xtag_bundle --refusals 200

Target (the issue's): RSS after the last refusal within 50 MB of RSS after the first. Prints JSON; exits 1 on a miss.

--storm N (issue 47's defect 6: two clients looping on reload left RSS 135 MB higher for good) instead reloads the
served bundle N times in a row (POST /v1/admin/reload {}, XTAG_RELOAD_INTERVAL_S=0 so that none is refused), a
few predictions between reloads, and reads RSS before (after warm-up traffic), during (the peak) and after (the
same traffic again, once the storm is over). Target: after within 10 % of before. With --before-code (a folder
holding an older `xtag` package, as bench/guard_cost.py's) the same storm runs on that code too, in the same
invocation, so that the two are compared under the same load; --result-name writes bench/results/NAME.json.

    .venv/bin/python -m bench.reload_leak --bundle bundles/debtags-xl --storm 50 \\
        --test data/debtags/test.jsonl.gz --before-code /tmp/before47/pkg --result-name reload_storm_debtags
"""

from __future__ import annotations

import argparse
import json
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from bench.helpers import load as service_load
from bench.helpers.results import save_result

ROOT = Path(__file__).resolve().parents[1]

BOUND_MB = 50.0
STORM_BOUND = 1.10  # RSS after a reload storm over RSS before it


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def poisoned_copy(bundle: Path, target: Path, rel: str) -> Path:
    """`bundle` copied to `target` with every value of `rel` NaN, its checksum updated in the manifest."""
    from xtag.models.bundle.manifest import sha256

    shutil.copytree(bundle, target)
    array = np.load(target / rel, allow_pickle=False)
    if array.dtype.kind != "f":
        raise SystemExit(f"{rel} holds {array.dtype}, not floats: pick a float array with --poison")
    np.save(target / rel, np.full_like(array, np.nan))
    manifest = json.loads((target / "manifest.json").read_text())
    manifest["files"][rel] = sha256(target / rel)
    (target / "manifest.json").write_text(json.dumps(manifest))
    return target


def start_server(bundle: Path, root: Path, port: int, admin_key: str, code: Path = ROOT) -> subprocess.Popen:
    """service_load's server (of the `xtag` package under `code`), with an admin key and `root` as the only place
    reloads may name, and no rate limit on reloads (what is measured is memory)."""
    extra = {
        "XTAG_LOG_LEVEL": "critical",
        "XTAG_ADMIN_KEY": admin_key,
        "XTAG_BUNDLE_ROOT": str(root),
        "XTAG_RELOAD_INTERVAL_S": "0",
    }
    return service_load.start_server(bundle, port, None, code, extra)


def storm(code: Path, bundle: Path, reloads: int, texts: list[str]) -> dict:
    """RSS of a server of `code` before, during and after `reloads` successful reloads of its bundle in a row."""
    key = secrets.token_hex(8)
    port = _free_port()
    proc = start_server(bundle, bundle.parent, port, key, code)
    bodies = [{"text": texts[i % len(texts)], "k": 10} for i in range(200)]
    statuses: dict[int, int] = {}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600) as client:

            def traffic(n: int) -> None:
                for body in bodies[:n]:
                    r = client.post("/v1/predict", json=body)
                    if r.status_code != 200:
                        raise SystemExit(f"/v1/predict answered {r.status_code}: {r.text[:300]}")

            traffic(len(bodies))
            before = rss_mib(proc.pid)
            during = []
            start = time.perf_counter()
            for _ in range(reloads):
                r = client.post("/v1/admin/reload", json={}, headers={"X-Admin-Key": key})
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                traffic(5)
                during.append(rss_mib(proc.pid))
            seconds = time.perf_counter() - start
            time.sleep(2)
            traffic(len(bodies))
            after = rss_mib(proc.pid)
    finally:
        proc.terminate()
        proc.wait(60)
    return {
        "code": str(code),
        "reloads": reloads,
        "statuses": {str(k): v for k, v in statuses.items()},
        "seconds": round(seconds, 1),
        "rss_mib": {"before": round(before, 1), "peak": round(max(during), 1), "after": round(after, 1)},
        "every_10th": [round(x, 1) for x in during[9::10]],
        "after_over_before": round(after / before, 3),
    }


def run_storm(args) -> int:
    from xtag.corpus.files import load_corpus

    texts = load_corpus(args.test).texts[:200]
    runs = {}
    if args.before_code is not None:
        runs["before"] = storm(args.before_code.resolve(), args.bundle, args.storm, texts)
    runs["after"] = storm(ROOT, args.bundle, args.storm, texts)
    ok = runs["after"]["statuses"] == {"200": args.storm} and runs["after"]["after_over_before"] <= STORM_BOUND
    payload = {"bundle": str(args.bundle), "bound": STORM_BOUND, "runs": runs, "ok": ok}
    print(json.dumps(payload, indent=1))
    if args.result_name:
        save_result(args.result_name, payload, benchmark="reload_storm")
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, required=True, help="a good bundle: served, and the source of the NaN copy")
    ap.add_argument("--refusals", type=int, default=200)
    ap.add_argument("--poison", default="rankers/engine/bias.npy", help="float array (.npy) of the bundle set to NaN")
    ap.add_argument("--port", type=int, default=0, help="default: a free one")
    ap.add_argument("--storm", type=int, default=0, help="N successful reloads in a row instead of the refusals")
    ap.add_argument("--test", type=Path, default=ROOT / "data/debtags/test.jsonl.gz", help="texts for --storm")
    ap.add_argument("--before-code", type=Path, help="--storm also on this folder's `xtag` package (older code)")
    ap.add_argument("--result-name", help="--storm: write bench/results/NAME.json")
    args = ap.parse_args()
    if args.storm:
        return run_storm(args)

    work = Path(tempfile.mkdtemp(prefix="reload_leak_"))
    proc = None
    try:
        nan = poisoned_copy(args.bundle, work / "nan", args.poison)
        key = secrets.token_hex(8)
        port = args.port or _free_port()
        proc = start_server(args.bundle, work, port, key)
        rss, statuses = [], {}
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600) as client:
            start = time.perf_counter()
            for _ in range(args.refusals):
                r = client.post("/v1/admin/reload", json={"bundle": str(nan)}, headers={"X-Admin-Key": key})
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                rss.append(rss_mib(proc.pid))
            seconds = time.perf_counter() - start
        out = {
            "bundle": str(args.bundle),
            "poisoned": args.poison,
            "refusals": args.refusals,
            "statuses": {str(k): v for k, v in statuses.items()},
            "seconds": round(seconds, 1),
            "rss_mib": {
                "after_first": round(rss[0], 1),
                "after_last": round(rss[-1], 1),
                "peak": round(max(rss), 1),
                "every_10th": [round(x, 1) for x in rss[9::10]],
            },
            "growth_mib": round(rss[-1] - rss[0], 1),
        }
        out["ok"] = statuses == {422: args.refusals} and out["growth_mib"] <= BOUND_MB
        print(json.dumps(out, indent=1))
        return 0 if out["ok"] else 1
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(60)
        shutil.rmtree(work, ignore_errors=True)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    sys.exit(main())
