"""Regenerate the tables of bench/RESULTS.md from bench/results/*.json (--check: fail when they disagree)."""

#     python -m bench.render_results            # rewrite the marked blocks of bench/RESULTS.md
#     python -m bench.render_results --check    # exit 1 if they are not what the JSON files render to (2: bad input)
#
# A block is `<!-- results:SPEC -->` ... `<!-- /results:SPEC -->`; everything outside blocks is hand-written and
# left alone. SPEC is NAME[#PARTS]: NAME a result file's stem or a glob over stems (their rows go into one table,
# files without a date first, then by date); PARTS, comma-separated: `provenance` (command, machine and source
# lines) and/or tables of the benchmark's builder (bench/result_tables/, a module per benchmark family); no PARTS:
# provenance and every table.
# Every result file must appear in some block, and its provenance in one. Stdlib only, so CI can run it as is.

from __future__ import annotations

import argparse
import difflib
import fnmatch
import json
import re
import sys
from pathlib import Path

from bench.result_tables import BUILDERS

BENCH = Path(__file__).resolve().parent
MARKER = re.compile(r"<!-- results:(?P<spec>\S+) -->\n(?P<body>.*?)<!-- /results:(?P=spec) -->", re.S)


class RenderError(Exception):
    pass


def natural(name: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def load_results(folder: Path) -> dict[str, dict]:
    docs = {}
    for path in sorted(folder.glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except ValueError as exc:
            raise RenderError(f"{path}: not JSON ({exc})") from exc
        if doc.get("name") != path.stem:
            raise RenderError(f"{path}: its name field is {doc.get('name')!r}, not {path.stem!r}")
        if doc.get("benchmark") not in BUILDERS:
            raise RenderError(f"{path}: no table builder for benchmark {doc.get('benchmark')!r}")
        docs[path.stem] = doc
    return docs


def machine_text(machine: dict | None) -> str:
    if not machine:
        return "not recorded"
    if machine.get("description"):
        return machine["description"]
    text = f"{machine.get('cpus')} CPUs"
    text += f" ({machine['cpu_model']})" if machine.get("cpu_model") else ""
    text += f", {machine['memory_gb']} GB RAM" if machine.get("memory_gb") else ""
    text += f", GPU {machine['gpu']}" if machine.get("gpu") else ""
    return text + f", {machine.get('platform')}, Python {machine.get('python')}"


def source_text(doc: dict) -> str:
    p = doc["provenance"]
    parts = [f"`bench/results/{doc['name']}.json`"]
    if p.get("transcribed_from"):
        text = f"transcribed from {p['transcribed_from']}"
        if p.get("recorded_in"):
            text += f"; figures recorded in commit {p['recorded_in']['commit'][:7]} ({p['recorded_in']['date'][:10]})"
        parts.append(text)
    if p.get("date"):
        text = f"run {p['date'][:16].replace('T', ' ')} UTC"
        if p.get("git_commit"):
            text += f" at commit {p['git_commit'][:7]}" + (" with uncommitted changes" if p.get("git_dirty") else "")
        parts.append(text)
    load = p.get("load_average") or {}
    if load.get("note"):
        parts.append(f"load average {load['note']}")
    elif load.get("start"):
        parts.append(f"load average {load['start'][0]:.2f} at start, {load['end'][0]:.2f} at end")
    for key in ("conditions", "transcription_note"):
        if p.get(key):
            parts.append(p[key])
    return parts[0] + ": " + "; ".join(parts[1:]) if len(parts) > 1 else parts[0]


def provenance_block(docs: list[dict]) -> str:
    commands, machines = [], []
    for doc in docs:
        command = doc["provenance"].get("command")
        for c in command if isinstance(command, list) else [command]:
            if c and c not in commands:
                commands.append(c)
        m = machine_text(doc["provenance"].get("machine"))
        if m not in machines:
            machines.append(m)
    lines = [f"- Command: `{c}`" for c in commands] + [f"- Machine: {m}" for m in machines]
    return "\n".join(lines + [f"- Result: {source_text(doc)}" for doc in docs])


def render_block(spec: str, docs: dict[str, dict]) -> tuple[str, list[str], bool]:
    """Markdown of one block; the files it draws on; whether it shows their provenance."""
    pattern, _, part = spec.partition("#")
    parts = part.split(",") if part else []
    names = [n for n in docs if fnmatch.fnmatchcase(n, pattern)]
    if not names:
        raise RenderError(f"block {spec!r}: no bench/results/*.json matches {pattern!r}")
    matched = sorted(
        (docs[n] for n in names),
        key=lambda d: (d["provenance"].get("date") is not None, d["provenance"].get("date") or "", natural(d["name"])),
    )
    kinds = {d["benchmark"] for d in matched}
    if len(kinds) > 1:
        raise RenderError(f"block {spec!r}: files of different benchmarks ({', '.join(sorted(kinds))})")
    with_provenance = not parts or "provenance" in parts
    pieces = [provenance_block(matched)] if with_provenance else []
    if parts != ["provenance"]:
        tables = BUILDERS[kinds.pop()](matched)
        for p in parts:
            if p != "provenance" and p not in tables:
                raise RenderError(f"block {spec!r}: no table {p!r} (there are: provenance, {', '.join(tables)})")
        pieces += [text for p, text in tables.items() if not parts or p in parts]
    return "\n\n".join(pieces) + "\n", names, with_provenance


def render(markdown: str, docs: dict[str, dict]) -> str:
    opened = len(re.findall(r"<!-- results:", markdown))
    blocks = list(MARKER.finditer(markdown))
    if opened != len(blocks):
        raise RenderError(f"{opened} opening markers but {len(blocks)} complete blocks: check the closing markers")
    used, shown = set(), set()

    def replace(m: re.Match) -> str:
        body, names, with_provenance = render_block(m["spec"], docs)
        used.update(names)
        if with_provenance:
            shown.update(names)
        return f"<!-- results:{m['spec']} -->\n{body}<!-- /results:{m['spec']} -->"

    out = MARKER.sub(replace, markdown)
    if set(docs) - used:
        raise RenderError(
            "results in no block of RESULTS.md (add a <!-- results:NAME --> block): "
            + ", ".join(sorted(set(docs) - used))
        )
    if set(docs) - shown:
        raise RenderError(
            "results whose provenance no block shows (add <!-- results:NAME#provenance -->): "
            + ", ".join(sorted(set(docs) - shown))
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if RESULTS.md is out of date")
    ap.add_argument("--results", type=Path, default=BENCH / "results", help="folder of result files")
    ap.add_argument("--markdown", type=Path, default=BENCH / "RESULTS.md")
    args = ap.parse_args()
    current = args.markdown.read_text()
    try:
        rendered = render(current, load_results(args.results))
    except RenderError as exc:
        print(f"render_results: {exc}", file=sys.stderr)
        return 2
    if rendered == current:
        return 0
    if args.check:
        diff = difflib.unified_diff(
            current.splitlines(), rendered.splitlines(), str(args.markdown), "rendered", lineterm="", n=1
        )
        print("\n".join(list(diff)[:60]), file=sys.stderr)
        print(
            f"render_results: {args.markdown} differs from what {args.results}/*.json render to; "
            f"run python -m bench.render_results",
            file=sys.stderr,
        )
        return 1
    args.markdown.write_text(rendered)
    print(f"rewrote {args.markdown}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
