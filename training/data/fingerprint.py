"""The corpus a run was trained on, as `run/corpus.json`: `--resume` refuses any other corpus.

A run's checkpoints (label tree, each level's rankers) are shaped by its corpus's labels and features;
resumed on changed data they fail deep in training with a shape error, or quietly mix two corpora.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from json.encoder import encode_basestring as _quoted  # json.dumps's own quoting of a str (ensure_ascii=False)
from pathlib import Path

from pydantic import BaseModel, ConfigDict
from xtag.corpus.files import Corpus
from xtag.models.errors import XtagError, reading
from xtag.models.files.atomic import write_text_atomic

FILE = "corpus.json"
_WHAT_TO_DO = "train into a new --out, or delete {run} and train there without --resume"


class CorpusChanged(XtagError):
    """`--resume` with a corpus other than the run's; scripts/main.sh tells it apart by the exit status."""

    exit_code = 3


class CorpusFingerprint(BaseModel):
    """sha256 of the rows as read (text and labels, in order), plus the row and label counts a person can check.

    The rows are hashed rather than the file's bytes: the same rows moved or rewritten (another gzip header,
    .jsonl vs .jsonl.gz, other ids) train the same model, and rows skipped by --skip-bad-rows train nothing.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    sha256: str
    documents: int
    labels: int

    @classmethod
    def of(cls, corpus: Corpus, n_labels: int) -> CorpusFingerprint:
        # Each row hashed as json.dumps([text, labels], ensure_ascii=False) + "\n" writes it (what runs' corpus.json
        # files hold), built from the json module's own string encoder: json.dumps with options builds an encoder
        # per call, which was most of the time; rows are hashed 1,024 at a time.
        digest = hashlib.sha256()
        for lo in range(0, len(corpus), 1024):
            rows = zip(corpus.texts[lo : lo + 1024], corpus.labels[lo : lo + 1024])
            digest.update("".join(f"[{_quoted(t)}, [{', '.join(map(_quoted, ls))}]]\n" for t, ls in rows).encode())
        return cls(sha256=digest.hexdigest(), documents=len(corpus), labels=n_labels)

    def describe(self) -> str:
        return f"{self.documents} documents, {self.labels} labels, sha256 {self.sha256[:12]}"

    def save(self, run: Path) -> None:
        write_text_atomic(run / FILE, self.model_dump_json(indent=2))

    def differs_from_run(self, run: Path) -> str:
        """Why these rows may not be the ones `run` was trained on ("" when its corpus.json says they are): what
        the run kept of its rows (TF-IDF, embeddings) is an update's only when they are."""
        path = run / FILE
        if not path.is_file():
            return f"{path} missing: nothing shows which rows the run was trained on"
        try:
            saved = CorpusFingerprint.model_validate_json(path.read_text())
        except (OSError, ValueError) as exc:
            return f"{path}: unreadable: {exc}"
        return "" if saved == self else "not the rows the run was trained on (corpus fingerprint differs)"

    def check_resume(self, run: Path, log: Callable[[dict], None], moved_from: Path | None = None) -> None:
        """Raise CorpusChanged unless `run` was started on these rows. A run from before fingerprints resumes
        unchecked on the same corpus file, saying so in its log; on another file (`moved_from` is the run's)
        nothing shows the rows are the same, so that is a changed corpus."""
        path = run / FILE
        if not path.exists():
            if moved_from is not None:
                raise CorpusChanged(
                    f"{run}: the run was started on another corpus file ({moved_from}) and predates corpus "
                    f"fingerprints, so nothing shows its rows are these; {_WHAT_TO_DO.format(run=run)}"
                )
            log({"event": "corpus_unchecked", "why": f"{path} missing (a run from before corpus fingerprints)"})
            return
        with reading(path, "the run's corpus fingerprint"):
            saved = CorpusFingerprint.model_validate_json(path.read_text())
        if saved != self:
            raise CorpusChanged(
                f"{run}: the corpus changed since this run was started (then: {saved.describe()}; now: "
                f"{self.describe()}); {_WHAT_TO_DO.format(run=run)}"
            )
