"""`xtag feedback export`: the service's feedback store (SQLite or PostgreSQL) as a corpus file for `xtag update`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from xtag.cli.options import fail, failing, finish, service_settings

app = typer.Typer(no_args_is_help=True, help="Feedback the service stored (POST /v1/feedback, Annif learn).")

DB_HELP = "the store: a SQLite file or a postgresql:// URL (default: XTAG_FEEDBACK_DB, else the service's default file)"


@app.command("export")
def export(
    out: Annotated[Path, typer.Option(help="corpus file to write (JSON lines: id, text, labels)")],
    db: Annotated[str | None, typer.Option(help=DB_HELP)] = None,
) -> None:
    """Write every stored feedback document, in arrival order, as a JSONL corpus."""
    from xtag.models.errors import XtagError
    from xtag.service.state.feedback_store import FeedbackStore, export_jsonl

    target = db or service_settings().feedback.feedback_db
    if not target.startswith(("postgres://", "postgresql://")) and not Path(target).is_file():
        fail(XtagError(f"{target}: no feedback store there (set --db or XTAG_FEEDBACK_DB)"))
    store = FeedbackStore(target)
    with failing(OSError, *store.driver_errors()):
        n = export_jsonl(store, out)
    store.close()
    finish(f"wrote {n} documents to {out}", f"xtag update RUN --corpus {out} --out RUN2")
