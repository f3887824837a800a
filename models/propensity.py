"""Label propensities (Jain et al. 2016): the one formula PSP@k, reweighting and the missing-label losses share.

p_j = 1 / (1 + C·(n_j + B)^(−A)), C = (ln N − 1)·(B + 1)^A, with n_j the label's training document
count and N the number of training documents. Per-label propensities can also come from a file: a
JSON object {"label": p, ...} or lines `label<TAB>p`; labels the file does not name use the formula.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from xtag.models.errors import XtagError

DEFAULT_A, DEFAULT_B = 0.55, 1.5


def jain_propensities(frequencies: np.ndarray, n_docs: int, A: float = DEFAULT_A, B: float = DEFAULT_B) -> np.ndarray:
    """Jain et al. (2016): p_l = 1 / (1 + C·exp(-A·log(N_l + B))), C = (log N − 1)·(B + 1)^A."""
    C = (np.log(n_docs) - 1.0) * (B + 1.0) ** A
    return 1.0 / (1.0 + C * np.exp(-A * np.log(np.asarray(frequencies, dtype=np.float64) + B)))


def _checked(path: Path, name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or not 0 < value <= 1:
        raise XtagError(f"{path}: the propensity of {name!r} is {value!r}; it must be a number in (0, 1]")
    return float(value)


def read_propensity_file(path: Path) -> dict[str, float]:
    """{label: p} from a JSON object or `label<TAB>p` lines; every p must lie in (0, 1]."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise XtagError(f"{path}: cannot read the propensity file ({exc})") from exc
    if text.lstrip().startswith("{"):
        try:
            table = json.loads(text)
        except ValueError as exc:
            raise XtagError(f"{path}: not valid JSON ({exc})") from exc
        return {str(name): _checked(path, str(name), p) for name, p in table.items()}
    out: dict[str, float] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) != 2:
            raise XtagError(f"{path}:{number}: expected `label<TAB>propensity`")
        try:
            value: object = float(cols[1])
        except ValueError:
            value = cols[1]
        out[cols[0].strip()] = _checked(path, cols[0].strip(), value)
    return out


def propensities_for(
    names: Sequence[str],
    frequencies: np.ndarray,
    n_docs: int,
    A: float = DEFAULT_A,
    B: float = DEFAULT_B,
    given: Mapping[str, float] | None = None,
) -> tuple[np.ndarray, int]:
    """p_j of every label: from `given` where it names the label, else Jain's formula; and how many were given."""
    p = jain_propensities(frequencies, max(int(n_docs), 3), A, B)  # ln N − 1 > 0 needs N ≥ 3
    if not given:
        return p, 0
    from_file = 0
    for j, name in enumerate(names):
        if name in given:
            p[j] = given[name]
            from_file += 1
    return p, from_file
