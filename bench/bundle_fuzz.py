"""Fuzz a bundle's index arrays: mutate one, re-hash the manifest, load, predict; the process must never die.

Issue 30's defect 3: a bundle with valid checksums but out-of-range indices (every value of
rankers/engine/fm_node.npy set to 50,000,000, the manifest re-hashed) loaded, warmed up, and segfaulted at the
first prediction. Loading now checks every index array against its bounds (models/files/index_bounds.py,
models/engine/checks.py). This drives that contract: each mutation takes one integer array of the bundle
(a .npy, or a member of a .npz) or one number of its JSON files (layout.json, the configs, the TF-IDF
vocabulary) and changes it in one of KINDS' ways, re-hashes the manifest and then either

- the load refuses it with an XtagError ("refused"), or
- it loads and predictions run, serial and parallel kernels, hash and scatter scoring ("served");

anything else fails the run: another exception ("error"), a dead process ("crash": segfault, abort) or
no progress within --timeout seconds ("hang"). Mutations run in a child process, one after the other on a
work copy of the bundle; a child that dies is replaced and the run goes on with the next mutation.
Mutation i depends only on --seed and i, so `--only I` replays one. A mutation of a vocabulary term puts
that term into the texts predicted: otherwise a broken column would go unread and count as served.

Before the random mutations, the CASES (issue 38: a vocabulary column of 50,000,000 or -5, a negative idf,
a label name given twice, a beam_size of 10^9, NaN weights, ...) are each applied alone; each must be
refused at load, so one that is served counts as a failure too ("accepted").

    .venv/bin/python -m bench.bundle_fuzz --bundle BUNDLE --mutations 2000 --seed 1

Prints JSON (counts, the failures with their mutation); exits 1 if any mutation failed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("values", "fill", "swap", "shift", "truncate-pad", "shorter", "longer", "off-by-one", "dtype", "reverse")
JSON_FILES = ("rankers/engine/layout.json", "rankers/config.json", "shortlist/config.json", "lightxml/config.json",
              "cascadexml/config.json", "features/tfidf/vocabulary.json", "labels.json")  # fmt: skip
FLOAT_TARGETS = ("features/tfidf/idf.npy",)  # float arrays whose values are bounded too (an idf is never negative)
VOCABULARY = "features/tfidf/vocabulary.json"
TEXTS_PER_BATCH = 6


# ---------------------------------------------------------------- what to mutate
def targets(bundle: Path) -> list[tuple[str, str | None]]:
    """(file, member) of every integer array the bundle holds (member None: a .npy, or a JSON file's numbers)."""
    files = json.loads((bundle / "manifest.json").read_text())["files"]
    out: list[tuple[str, str | None]] = []
    for rel in sorted(files):
        if rel.endswith(".npy"):
            if np.load(bundle / rel, mmap_mode="r", allow_pickle=False).dtype.kind in "iu" or rel in FLOAT_TARGETS:
                out.append((rel, None))
        elif rel.endswith(".npz"):
            with np.load(bundle / rel, allow_pickle=False) as z:
                out += [(rel, key) for key in z.files if z[key].dtype.kind in "iu"]
        elif rel in JSON_FILES:
            out.append((rel, None))
    return out


def wild(rng: np.random.Generator, a: np.ndarray) -> int:
    """A value an index array should not hold, or a plausible one in the wrong place."""
    n = max(a.size, 1)
    hi = int(a.max()) if a.size else 0
    lo = int(a.min()) if a.size else 0
    picks = [-1, -2, 0, 1, n - 1, n, n + 1, hi + 1, hi, lo - 1, 50_000_000, -50_000_000, 2**31 - 1, 2**32,
             -(2**31), 2**62, int(rng.integers(lo - 10, hi + 11))]  # fmt: skip
    return picks[int(rng.integers(len(picks)))]


def mutate_array(rng: np.random.Generator, a: np.ndarray, kind: str) -> np.ndarray:
    a = np.array(a)
    n = a.size
    flat = a.reshape(-1)
    if kind == "values" and n:
        for pos in rng.integers(0, n, size=int(rng.integers(1, 4))):
            flat[pos] = np.array(wild(rng, a)).astype(a.dtype)  # wraps when out of the dtype's range: fine
    elif kind == "fill":
        flat[:] = np.array(wild(rng, a)).astype(a.dtype)
    elif kind == "swap" and n > 1:
        i, j = rng.choice(n, size=2, replace=False)
        flat[i], flat[j] = flat[j], flat[i]
    elif kind == "shift" and n > 1:
        flat[:] = np.roll(flat, int(rng.choice([-1, 1])))
    elif kind == "truncate-pad" and n > 1:  # the right length, the wrong content: cut, then padded back
        cut = int(rng.integers(1, n))
        flat[cut:] = flat[cut - 1] if rng.random() < 0.5 else 0
    elif kind == "shorter" and n:
        return flat[: int(rng.integers(0, n))].copy() if a.ndim == 1 else a[:-1].copy()
    elif kind == "longer":
        return np.concatenate([flat, flat[-1:] if n else np.zeros(1, a.dtype)]) if a.ndim == 1 else a
    elif kind == "off-by-one" and n:
        delta = int(rng.choice([-1, 1]))
        if rng.random() < 0.5:
            flat += delta
        else:
            flat[int(rng.integers(n))] += delta
    elif kind == "dtype":
        return a.astype(rng.choice(["int8", "int16", "int32", "int64", "uint32", "float64"]))
    elif kind == "reverse":
        flat[:] = flat[::-1].copy()
    return a


def mutate_json(rng: np.random.Generator, value, kind: str, touched: list | None = None):
    """One number (or two, for `swap`) of a JSON document changed; the top-level keys changed go to `touched`
    (a vocabulary's terms)."""
    touched = [] if touched is None else touched
    paths = []

    def walk(v, path):
        if isinstance(v, bool):
            return
        if isinstance(v, int):
            paths.append(path)
        elif isinstance(v, dict):
            for k, x in v.items():
                walk(x, (*path, k))
        elif isinstance(v, list):
            for i, x in enumerate(v):
                walk(x, (*path, i))

    walk(value, ())
    if not paths:
        return value
    path = paths[int(rng.integers(len(paths)))]
    touched.append(path[0])
    holder = value
    for key in path[:-1]:
        holder = holder[key]
    old = holder[path[-1]]
    if kind == "swap" and len(paths) > 1:
        other = paths[int(rng.integers(len(paths)))]
        touched.append(other[0])
        h2 = value
        for key in other[:-1]:
            h2 = h2[key]
        holder[path[-1]], h2[other[-1]] = h2[other[-1]], old
    elif kind == "dtype":
        holder[path[-1]] = float(old) + 0.5
    elif kind == "off-by-one":
        holder[path[-1]] = old + int(rng.choice([-1, 1]))
    else:
        holder[path[-1]] = wild(rng, np.array([old]))
    return value


def mutation(seed: int, i: int, found: list[tuple[str, str | None]]) -> tuple[str, str | None, str]:
    rng = np.random.default_rng([seed, i])
    rel, member = found[int(rng.integers(len(found)))]
    return rel, member, KINDS[int(rng.integers(len(KINDS)))]


def apply(work: Path, seed: int, i: int, found) -> tuple[str, list[str]]:
    """Mutate the work copy (the manifest re-hashed); returns what was done and the vocabulary terms changed."""
    rel, member, kind = mutation(seed, i, found)
    rng = np.random.default_rng([seed, i, 1])
    path = work / rel
    touched: list = []
    if rel.endswith(".json"):
        path.write_text(json.dumps(mutate_json(rng, json.loads(path.read_text()), kind, touched)))
    elif member is None:
        np.save(path, mutate_array(rng, np.load(path, allow_pickle=False), kind))
    else:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        arrays[member] = mutate_array(rng, arrays[member], kind)
        with open(path, "wb") as fh:
            np.savez(fh, **arrays)
    rehash(work, rel)
    return f"{rel}{f'[{member}]' if member else ''} {kind}", [str(t) for t in touched] if rel == VOCABULARY else []


def rehash(work: Path, rel: str) -> None:
    from xtag.models.bundle.manifest import sha256

    manifest = json.loads((work / "manifest.json").read_text())
    manifest["files"][rel] = sha256(work / rel)
    (work / "manifest.json").write_text(json.dumps(manifest))


# ---------------------------------------------------------------- the named cases, each to be refused at load
def _column(value):
    """Give the first word of the vocabulary column `value`; the word goes into the predicted texts."""

    def change(vocab: dict):
        word = next(t for t in vocab if " " not in t)
        vocab[word] = value
        return vocab, [word]

    return change


def _column_twice(vocab: dict):
    a, b = [t for t in vocab if " " not in t][:2]
    vocab[a] = vocab[b]
    return vocab, [a, b]


def _label_twice(labels: dict):
    labels["names"][1] = labels["names"][0]
    return labels, []


def _negative_frequency(labels: dict):
    labels["frequencies"][0] = -7
    return labels, []


def _field(name: str, value):
    def change(config: dict):
        config[name] = value
        return config, []

    return change


def _at(value, every: int = 1):
    def change(a: np.ndarray):
        a = np.array(a)
        a.reshape(-1)[::every] = value
        return a, []

    return change


# name → (file, .npz member or None, change: the parsed JSON or the array → (changed, vocabulary words to predict))
CASES = {
    "vocabulary column 50,000,000": (VOCABULARY, None, _column(50_000_000)),
    "vocabulary column -5": (VOCABULARY, None, _column(-5)),
    "vocabulary column 1.5": (VOCABULARY, None, _column(1.5)),
    "vocabulary column 2^64": (VOCABULARY, None, _column(2**64)),
    "vocabulary column given to two terms": (VOCABULARY, None, _column_twice),
    "negative idf": ("features/tfidf/idf.npy", None, _at(-3.0, every=97)),
    "NaN idf": ("features/tfidf/idf.npy", None, _at(np.nan, every=97)),
    "label name given twice": ("labels.json", None, _label_twice),
    "negative label frequency": ("labels.json", None, _negative_frequency),
    "rankers beam_size 10^9": ("rankers/config.json", None, _field("beam_size", 10**9)),
    "rankers n_features + 1": ("rankers/config.json", None, lambda c: _field("n_features", c["n_features"] + 1)(c)),
    "NaN ranker weights (engine)": ("rankers/engine/ent_w.npy", None, _at(np.nan, every=7)),
    "inf ranker biases (engine)": ("rankers/engine/bias.npy", None, _at(np.inf, every=3)),
    "NaN ranker weights (level file)": ("rankers/level_1.npz", "data", _at(np.nan)),
    "HNSW shortlist ef_search 10^9": (
        "shortlist/config.json",
        None,
        lambda c: (c | {"config": c["config"] | {"ef_search": 10**9}}, []),
    ),
    "LightXML beam_size 10^9": ("lightxml/config.json", None, _field("beam_size", 10**9)),
    "CascadeXML top_k 10^9": ("cascadexml/config.json", None, _field("top_k", [10**9])),
    "LaMP candidates 10^9": ("lamp/lamp.json", None, _field("candidates", 10**9)),
}


def cases_for(bundle: Path) -> list[str]:
    """The CASES whose file the bundle holds."""
    files = json.loads((bundle / "manifest.json").read_text())["files"]
    return [name for name, (rel, _, _) in CASES.items() if rel in files]


def apply_case(work: Path, name: str) -> tuple[str, list[str]]:
    rel, member, change = CASES[name]
    path = work / rel
    if rel.endswith(".json"):
        value, words = change(json.loads(path.read_text()))
        path.write_text(json.dumps(value))
    elif member is None:
        value, words = change(np.load(path, allow_pickle=False))
        np.save(path, value)
    else:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        arrays[member], words = change(arrays[member])
        with open(path, "wb") as fh:
            np.savez(fh, **arrays)
    rehash(work, rel)
    return f"case: {name}", words


# ---------------------------------------------------------------- the child: mutate, load, predict
def child(bundle: Path, seed: int, start: int, stop: int, cases: bool = False) -> None:
    """Mutations start..stop-1 (with `cases`: cases_for(bundle)[start:stop]), one line per event on stdout:
    `start I WHAT`, then `done I OUTCOME DETAIL`."""
    from xtag.models.bundle.loader import load_bundle
    from xtag.models.errors import XtagError

    found = targets(bundle)
    work = Path(tempfile.mkdtemp(prefix="bundle_fuzz_")) / "b"
    shutil.copytree(bundle, work)
    originals = {rel: (work / rel).read_bytes() for rel, _ in found} | {
        "manifest.json": (work / "manifest.json").read_bytes()
    }
    words = _vocabulary(bundle)
    names = cases_for(bundle)
    originals |= {CASES[n][0]: (work / CASES[n][0]).read_bytes() for n in names}
    try:
        for i in range(start, stop):
            label = f"case: {names[i]}" if cases else " ".join(map(str, mutation(seed, i, found)))
            print(f"start {i} {label}", flush=True)
            what, touched = apply_case(work, names[i]) if cases else apply(work, seed, i, found)
            try:
                outcome, detail = "served", ""
                try:
                    loaded = load_bundle(work)
                except XtagError as exc:
                    outcome, detail = "refused", str(exc).replace(str(work), "B")[:300]
                else:
                    _predict(loaded.predictor, words, np.random.default_rng([seed, i, 2]), touched)
                    del loaded
            except Exception as exc:  # anything but XtagError at load, or any failure to predict
                outcome = "error"
                detail = (
                    f"{type(exc).__name__}: {exc}"[:300]
                    + " | "
                    + traceback.format_exc(limit=-3).replace("\n", " ")[-500:]
                )
            print(f"done {i} {outcome} {what} :: {detail}", flush=True)
            for rel, data in originals.items():
                (work / rel).write_bytes(data)
    finally:
        shutil.rmtree(work.parent, ignore_errors=True)


def _vocabulary(bundle: Path) -> list[str]:
    path = bundle / "features" / "tfidf" / "vocabulary.json"
    words = [w for w in json.loads(path.read_text()) if " " not in w] if path.is_file() else []
    return words or ["python", "audio", "game", "editor", "network", "library", "tool"]


def _predict(predictor, words: list[str], rng: np.random.Generator, touched: list[str] = ()) -> None:
    """Short documents (hash lookups), long ones (scatter walk), one alone (serial kernel), a batch (pool); each
    holds the vocabulary terms the mutation `touched`."""
    docs = [" ".join(rng.choice(words, size=int(rng.integers(1, 4)))) for _ in range(TEXTS_PER_BATCH // 2)]
    docs += [" ".join(rng.choice(words, size=min(len(words), 400))) for _ in range(TEXTS_PER_BATCH // 2)]
    docs = [" ".join([*touched, doc]) for doc in docs]
    for batch, k, beam in ((docs[:1], 5, None), (docs, 10, None), (docs, 3, 50), (docs[-1:], 1, 1)):
        preds = predictor.predict(batch, k=k, beam_size=beam)
        predictor.named(preds)


# ---------------------------------------------------------------- the parent: run children, survive their deaths
def run(bundle: Path, mutations: int, seed: int, timeout: float, cases: bool = False) -> dict:
    """`mutations` random mutations, or (`cases`) the first `mutations` of cases_for(bundle), where a case
    that is served fails too; counts, failures, and the refusals by what was mutated (or each case's message)."""
    counts = {"refused": 0, "served": 0, "error": 0, "crash": 0, "hang": 0}
    failures, refusals, served = [], {}, {}
    i = 0
    started = time.perf_counter()
    while i < mutations:
        cmd = [sys.executable, __file__, "--bundle", str(bundle), "--seed", str(seed), "--child", f"{i}:{mutations}"]
        cmd += ["--cases"] if cases else []
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0)
        current, what = None, ""
        deadline = time.monotonic() + timeout + 60  # the first mutation pays for imports and kernel compilation
        for line in _lines(proc, lambda: deadline):
            kind, _, rest = line.partition(" ")
            n, _, rest = rest.partition(" ")
            if kind == "start":
                current, what = int(n), rest
                deadline = time.monotonic() + timeout
            elif kind == "done":
                outcome, _, detail = rest.partition(" ")
                counts[outcome] += 1
                if outcome == "error" or (cases and outcome == "served"):
                    failures.append({"mutation": int(n), "outcome": outcome, "detail": detail})
                elif outcome == "refused" and cases:
                    key, _, message = detail.partition(" :: ")
                    refusals[key] = message
                elif outcome == "refused":
                    key = detail.split(" :: ")[0]
                    refusals[key] = refusals.get(key, 0) + 1
                elif outcome == "served":
                    key = detail.split(" :: ")[0].rsplit(" ", 1)[0]  # the file (and member), not the kind
                    served[key] = served.get(key, 0) + 1
                current, i = None, int(n) + 1
        if proc.poll() is None:  # no progress in time
            proc.kill()
            proc.wait()
            outcome = "hang"
        else:
            outcome = "crash" if proc.returncode != 0 else None
        if current is not None:
            counts[outcome or "crash"] += 1
            failures.append(
                {"mutation": current, "outcome": outcome or "crash", "detail": f"{what} (exit {proc.returncode})"}
            )
            i = current + 1
        elif proc.returncode not in (0, None) and i < mutations:
            raise SystemExit(f"fuzz child exited with {proc.returncode} before its first mutation")
    return {
        "bundle": str(bundle),
        "seed": seed,
        "mutations": mutations,
        "seconds": round(time.perf_counter() - started, 1),
        "counts": counts,
        "failures": failures,
        "refused_by_kind": refusals if cases else dict(sorted(refusals.items(), key=lambda kv: -kv[1])[:40]),
        "served_by_file": dict(sorted(served.items(), key=lambda kv: -kv[1])),
    }


def _lines(proc: subprocess.Popen, deadline):
    """The child's stdout lines, until it exits or `deadline()` passes without a line (raw reads: a buffered
    reader could hold lines that select() then no longer reports)."""
    import os
    import selectors

    fd = proc.stdout.fileno()
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    pending = b""
    while True:
        left = deadline() - time.monotonic()
        if left <= 0 or not sel.select(timeout=left):
            return
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            proc.wait()
            return
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            yield line.decode(errors="replace")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, required=True)
    ap.add_argument("--mutations", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--timeout", type=float, default=60.0, help="seconds one mutation may take before it counts as a hang"
    )
    ap.add_argument("--only", type=int, help="replay mutation ONLY in this process and print its outcome")
    ap.add_argument("--no-cases", action="store_true", help="leave out the named CASES (random mutations only)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--cases", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        start, stop = map(int, args.child.split(":"))
        child(args.bundle, args.seed, start, stop, args.cases)
        return 0
    if args.only is not None:
        child(args.bundle, args.seed, args.only, args.only + 1)
        return 0
    named = [] if args.no_cases else cases_for(args.bundle)
    cases = run(args.bundle, len(named), args.seed, args.timeout, cases=True) if named else None
    result = run(args.bundle, args.mutations, args.seed, args.timeout)
    if cases is not None:
        result["cases"] = {k: cases[k] for k in ("counts", "failures")} | {"refused_with": cases["refused_by_kind"]}
    print(json.dumps(result, indent=1))
    return 1 if result["failures"] or (cases and cases["failures"]) else 0


if __name__ == "__main__":
    sys.exit(main())
