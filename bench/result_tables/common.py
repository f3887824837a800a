"""What every table module shares: the accuracy columns, cell formats, the table itself, metric conventions."""

from __future__ import annotations

# The accuracy columns every benchmark reports; tables with more columns extend this tuple.
METRICS = ("P@1", "P@3", "P@5", "PSP@1", "PSP@3", "PSP@5")


# -- formatting ----------------------------------------------------------------------------------------------------


def f2(x) -> str:
    return "" if x is None else f"{x:.2f}"


def f1(x) -> str:
    return "" if x is None else f"{x:.1f}"


def f0(x) -> str:
    return "" if x is None else f"{x:.0f}"


def thousands(x) -> str:
    return "" if x is None else f"{x:,.0f}"


def sig3(x) -> str:
    """Three significant digits, trailing zeros kept (0.110, 16.1, 210)."""
    return "" if x is None else format(x, "#.3g").rstrip(".")


def e1(x) -> str:
    return "" if x is None else f"{x:.1e}"


def ms(x) -> str:
    """Latencies: two decimals below 10 ms, one above."""
    return "" if x is None else f"{x:.2f}" if x < 10 else f"{x:.1f}"


def signed(x, fmt: str = ".2f") -> str:
    return format(x, "+" + fmt).replace("-", "−")


def bold(text: str) -> str:
    return f"**{text}**" if text else text


def table(header: list[str], align: str, rows: list[list[str]]) -> str:
    """align: one letter per column, l or r."""
    rule = "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"
    line = lambda cells: "|" + "|".join(f" {c} " if c else " " for c in cells) + "|"  # noqa: E731
    return "\n".join([line(header), rule] + [line(r) for r in rows])


def bold_column_maxima(rows: list[list[str]], columns: range) -> None:
    """Bold the highest figure of each column in place (ties: all of them)."""
    for c in columns:
        values = [float(r[c]) for r in rows if r[c]]
        for r in rows:
            if values and r[c] and float(r[c]) == max(values):
                r[c] = bold(r[c])


def get(d: dict | None, *keys):
    """d[k1][k2]... or None where a level is missing."""
    for k in keys:
        if not isinstance(d, dict) or d.get(k) is None:
            return None
        d = d[k]
    return d


def payloads(docs: list[dict]) -> list[dict]:
    return [d["result"] for d in docs]


def variants(result: dict) -> list[tuple[str, dict]]:
    """(name, entry) of the entries of a transformer run that carry metrics."""
    return [(name, v) for name, v in result.items() if isinstance(v, dict) and "metrics" in v]


def parity_texts(entries) -> int:
    """How many texts the ONNX parity check compared: the first entry that records it, else 64."""
    return next((get(v, "export", "parity_texts") for v in entries if get(v, "export", "parity_texts")), 64)


def train_seconds(entry: dict):
    return get(entry, "summary", "total_seconds") or entry.get("train_seconds_this_invocation")


# Metric convention of a result (models/metrics.py): the benchmark scripts record "convention"; results from
# before issue 14 lack it and were computed under the known-labels convention.
BEFORE_XMC = "known-labels (computed before the XMC convention became the default)"


CONVENTION_TEXT = {
    "xmc": "xmc (unseen test labels count as misses; macro metrics over the test split's labels)",
    "known-labels": "known-labels (unseen test labels dropped; macro metrics over all model labels)",
}


def convention(*levels: dict | None) -> str:
    """The first "convention" recorded in `levels` (e.g. a variant, then its result), else BEFORE_XMC."""
    name = next((d["convention"] for d in levels if isinstance(d, dict) and d.get("convention")), None)
    return BEFORE_XMC if name is None else CONVENTION_TEXT.get(name, name)


def convention_line(names: list[str]) -> str:
    """One line under a table of accuracy figures naming the convention(s) its rows were computed with."""
    unique = list(dict.fromkeys(names)) or [BEFORE_XMC]
    if len(unique) == 1:
        return f"Metric convention: {unique[0]}."
    return "Metric conventions (see the convention column): " + "; ".join(unique) + "."


def accuracy_table(header: list[str], align: str, rows: list[list[str]], conventions: list[str]) -> str:
    """A table of accuracy rows, with a convention column only where the rows' conventions differ, then their line."""
    mixed = len(set(conventions)) > 1
    return (
        table(
            header + ["convention"] * mixed,
            align + "l" * mixed,
            [row + [c.split(" ")[0]] * mixed for row, c in zip(rows, conventions)],
        )
        + "\n\n"
        + convention_line(conventions)
    )


def one_result_each(build):
    """A builder of one result's tables; files matched together by one marker get theirs one after the other."""

    def per_file(docs: list[dict]) -> dict[str, str]:
        out: dict[str, list[str]] = {}
        for doc in docs:
            for part, text in build(doc["result"]).items():
                out.setdefault(part, []).append(text)
        return {part: "\n\n".join(texts) for part, texts in out.items()}

    per_file.__name__ = build.__name__
    return per_file
