"""Labels that speak on debdeps (issue 49): the label-text encoders' retrieval by a label's text alone
(bench/label_encoders.py, one row per encoder kind), and labels added later from their text alone
(bench/labels_added_later.py). The stage fused with the tree: label_text_stage.py."""

from __future__ import annotations

from .common import bold_column_maxima, f1, f2, ms, one_result_each, table

COLUMNS = ("P@1", "P@5", "R@10", "R@100", "test_only_R@10", "test_only_R@100", "test_only_text_R@10")
HEADER = ("P@1", "P@5", "R@10", "R@100", "new R@10", "new R@100", "new w/ text R@10")


def _name(name: str) -> str:
    """`tfidf-linear:shared=true` → `tfidf-linear (shared=true)`."""
    kind, _, extra = name.partition(":")
    return f"{kind} ({extra.replace(',', ', ')})" if extra else kind


@one_result_each
def label_encoders(r: dict) -> dict[str, str]:
    """bench/label_encoders.py: each kind ranks every label of the label file for each test document."""
    rows = []
    for name, row in r["rows"].items():
        epochs = row.get("epochs", [])
        rows.append(
            [
                _name(name),
                *(f2(row[c]) for c in COLUMNS),
                f1(row["train_seconds"]),
                f1(sum(e["seconds"] for e in epochs)) if epochs else "",
                f1(row["encode_labels_seconds"]),
                ms(row["doc_p50_ms"]),
                f"{row['load_average'][0]:.0f}-{row['load_average'][1]:.0f}",
            ]
        )
    bold_column_maxima(rows, range(1, 1 + len(COLUMNS)))
    header = ["encoder", *HEADER, "train s", "of it epochs s", "encode labels s", "doc p50 ms", "load"]
    hard = r.get("hard_negatives") or {}
    note = (
        f"\n\n{r['test_documents']:,} {r['data']} test documents rank all {r['labels']:,} labels of the label file by "
        f"cosine, each document's own id excluded ({r['test_documents_that_are_labels']:,} are labels); trained on "
        f"{r['train_documents']:,} documents and the texts of their {r['train_labels']:,} labels. P@k and R@k over every "
        "test label; new: the occurrences of labels no training document carries "
        f"({r['rows'][next(iter(r['rows']))]['test_only_occurrences']:,}; w/ text: the "
        f"{r['rows'][next(iter(r['rows']))]['test_only_with_text']:,} whose label has a description). train s: "
        "features, distillation (static) and epochs; doc p50: one test text through the document side in-process."
    )
    if hard:
        note += (
            f" Tree negatives: XR-Linear trained on the training file ({hard['tree_train_seconds']:.0f} s, not in "
            f"train s), its top {hard['m']} for each training document."
        )
    return {"table": table(header, "l" + "r" * (len(header) - 1), rows) + note}


def _load(pair: list[float]) -> str:
    return f"{pair[0]:.1f}"


@one_result_each
def labels_added_later(r: dict) -> dict[str, str]:
    """bench/labels_added_later.py: the held labels' recall@10 and everyone's P@1/P@5 before the update, after it and
    in the reference that trained on them; the update's wall time."""
    split, upd, rows = r["split"], r["update"], r["rows"]
    body = [
        [
            name,
            f"{x['labels']:,}",
            f2(x["P@1"]),
            f2(x["P@5"]),
            f2(x["held_recall@10"]),
            f1(x["evaluate_seconds"]),
            _load(x["load_average_before"]),
        ]
        for name, x in rows.items()
    ]
    header = ["model", "labels", "P@1", "P@5", "held labels' R@10", "evaluate s", "load"]
    held = rows["reference"]
    note = (
        f"\n\n{split['held_labels']:,} labels (seed {split['seed']}) drawn among the {split['pool']:,} training labels "
        f"that have a description and occur in the test split; dropped from the training documents' labels "
        f"({split['held_train_occurrences']:,} occurrences; {split['documents_left_without_labels']:,} of "
        f"{split['train_documents']:,} documents left with no label and left out) and from the run's label file. "
        f"Held labels' R@10: of their {held['held_test_occurrences']:,} test occurrences (in "
        f"{held['held_test_documents']:,} documents), the share in the full top 10, own id excluded. "
        f"Training of the run before the update: {f1(rows['before update']['train_seconds'])} s.\n\n"
        f"`xtag update RUN --labels held.jsonl --out RUN2` added {upd['added_labels']:,} labels in "
        f"**{f1(upd['update_wall_seconds'])} s** of wall time as a command ({f1(upd['update_seconds_in_process'])} s "
        f"inside update_labels; load {_load(upd['load_average_before'])} before, "
        f"{_load(upd['load_average_after'])} after); its export {f1(upd['export_seconds'])} s."
    )
    if "kept" in r:
        kept = r["kept"]
        note += (
            f" Old labels: in {kept['old_order_kept']:,} of {kept['documents']:,} test documents "
            "the old labels of the updated top 10 are the head of the top 10 before the update, in order (an added label "
            f"may come between them); the largest change of a score both top 10s share: {kept['max_score_change']:.2g}."
        )
    return {"table": table(header, "lrrrrrr", body) + note}
