"""The peers on debdeps with each document's own id excluded (bench/peers_exclude_self.py, issue 49)."""

from __future__ import annotations

from .common import f0, f2, one_result_each, table

COLUMNS = ("P@1", "P@5", "nDCG@5", "PSP@5", "macro-R@5", "R@10", "test_only_R@10")
NAMES = {"pecos_xrlinear": "PECOS XR-Linear", "omikuji_bonsai": "Omikuji Bonsai"}


@one_result_each
def peers_exclude_self(r: dict) -> dict[str, str]:
    rows = []
    for key, metrics in r["rows"].items():
        peer, _, kept = key.partition(" ")
        name = NAMES.get(peer, peer) + (" (own id not excluded)" if kept else "")
        rows.append([name, *(f2(metrics.get(c)) for c in COLUMNS), f0(r["runs"][peer]["train_s"]) if not kept else ""])
    header = ["peer", *COLUMNS[:-1], "test-only labels' R@10", "train s"]
    return {"quality": table(header, "l" + "r" * (len(COLUMNS) + 1), rows)}
