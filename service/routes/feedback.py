"""POST /v1/feedback and Annif's POST /v1/projects/{id}/learn: corrected documents into the feedback store.

Both sit on the admin plane (require_admin_key, as reload), and writing needs XTAG_ADMIN_KEY configured:
what is stored here becomes training data (`xtag feedback export` → `xtag update`), so holders of the
API key alone may not write it. Writes run on a writer thread of their own, those that arrive together
committed in one transaction, each with a deadline (XTAG_FEEDBACK_TIMEOUT_S): prediction has its own
threads and never waits on the database, and a slow or failing store answers 503 for feedback only.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

from fastapi import APIRouter, Request
from starlette.responses import Response
from xtag.service.deps import check_text_lengths, document_limit, openapi_body, parse_body
from xtag.service.http.problems import Problem, problem_responses
from xtag.service.routes.annif import _project
from xtag.service.schemas import AnnifLearnRequest, FeedbackRequest, FeedbackResponse, integer_id
from xtag.service.state.feedback_store import Feedback, FeedbackStore, Written

router = APIRouter(tags=["feedback"])
log = logging.getLogger("xtag.service")


class FeedbackWriter:
    """The store, its one writer thread, and the writes waiting for it (group commit).

    A write queues its documents and asks the writer thread to commit; the thread takes every write queued
    by then and commits them in one transaction, answering each with its own counts. While one transaction
    runs, the next group gathers, so under load each sync to disk carries every write that arrived meanwhile
    (one transaction per write answered 503 to 814 of 1,000 documents from 20 clients, issue 38). Writes not
    yet answered are counted, and past XTAG_FEEDBACK_MAX_PENDING refused at once: a slow or stuck store cannot
    pile up work. A failed transaction fails every write of its group (503; nothing of it was stored, so a
    retry is safe)."""

    def __init__(self, target: str, timeout_s: float, max_pending: int):
        self.store = FeedbackStore(target, timeout_s)
        self.timeout_s = timeout_s
        self.max_pending = max_pending
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="xtag-feedback")
        self.queue: deque[tuple[list[Feedback], Future]] = deque()
        self.pending = 0

    async def write(self, items: list[Feedback]) -> Written:
        if self.pending >= self.max_pending:
            detail = (
                f"the feedback store is busy: {self.pending} writes wait for it, the limit is {self.max_pending} "
                "(XTAG_FEEDBACK_MAX_PENDING); retry later"
            )
            raise Problem(503, "feedback-unavailable", detail, headers={"Retry-After": "5"})
        self.pending += 1
        answer: Future = Future()
        self.queue.append((items, answer))
        self.executor.submit(self._commit_queued)
        waiter = asyncio.wrap_future(answer)
        waiter.add_done_callback(lambda _: self._done())
        try:
            return await asyncio.wait_for(asyncio.shield(waiter), self.timeout_s)
        except TimeoutError:
            log.error("feedback write to %s took over %.1f s", self.store.where, self.timeout_s)
            detail = f"the feedback store did not answer within {self.timeout_s:g} s (XTAG_FEEDBACK_TIMEOUT_S)"
        except Exception as exc:  # sqlite3/psycopg errors, a missing driver: the store's problem, not the client's
            detail = f"the feedback store ({self.store.where}) failed: {type(exc).__name__}"
        raise Problem(503, "feedback-unavailable", detail, headers={"Retry-After": "5"})

    def _commit_queued(self) -> None:
        """On the writer thread: every write queued now, in one transaction (none left: an earlier call took them)."""
        group = []
        while self.queue:  # only this thread takes from the queue
            group.append(self.queue.popleft())
        if not group:
            return
        try:
            written = self.store.add([items for items, _ in group])
        except Exception as exc:
            log.error("feedback write of %d requests to %s failed: %s", len(group), self.store.where, exc)
            for _, answer in group:
                answer.set_exception(exc)
            return
        log.debug(
            "feedback: %d writes, %d documents committed in one transaction",
            len(group),
            sum(len(items) for items, _ in group),
        )
        for (_, answer), counts in zip(group, written):
            answer.set_result(counts)

    def _done(self) -> None:
        self.pending -= 1

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.store.close()


def writer(request: Request) -> FeedbackWriter:
    """The app's writer, made on first use (a store that cannot open never delays startup)."""
    state, settings = request.app.state, request.app.state.settings
    if settings.admin.admin_key is None:
        raise Problem(
            403,
            "admin-key-required",
            "storing feedback needs an admin key (set XTAG_ADMIN_KEY): it becomes training data",
        )
    if state.feedback is None:
        state.feedback = FeedbackWriter(
            settings.feedback.feedback_db, settings.feedback.feedback_timeout_s, settings.feedback.feedback_max_pending
        )
    return state.feedback


RESPONSES = {
    400: "invalid JSON or UTF-8, or too many documents",
    401: "missing or wrong admin key",
    403: "no XTAG_ADMIN_KEY configured",
    413: "body or text too large",
    415: "not application/json",
    422: "invalid field",
    503: "the feedback store is slow or failing, or XTAG_FEEDBACK_MAX_PENDING writes already wait for it (with "
    "Retry-After; predictions are unaffected)",
}


@router.post(
    "/v1/feedback",
    response_model=FeedbackResponse,
    openapi_extra=openapi_body(FeedbackRequest),
    summary="Store documents with their correct labels (new label names welcome) for `xtag update`",
    responses=problem_responses(RESPONSES),
)
async def feedback(request: Request) -> dict:
    out = writer(request)
    limit = request.app.state.settings.limits.max_batch_documents
    body = await parse_body(request, FeedbackRequest, check=document_limit(limit))
    check_text_lengths(request, [d.text for d in body.documents])
    items = [
        Feedback(
            d.text, list(dict.fromkeys(d.labels)), None if d.id is None else str(d.id), integer_id=integer_id(d.id)
        )
        for d in body.documents
    ]
    written = await out.write(items)
    return {"stored": written.stored, "duplicates": written.duplicates}


def _subject_name(request: Request, uri: str | None, label: str | None, where: str) -> str:
    """Annif names a subject by uri or label: the label if given, else the uri less XTAG_ANNIF_URI_PREFIX."""
    prefix = request.app.state.settings.server.annif_uri_prefix
    name = label if label and label.strip() else None
    if name is None and uri and uri.strip():
        name = uri[len(prefix) :] if prefix and uri.startswith(prefix) else uri
    if not name or not name.strip():
        raise Problem(400, "bad-request", f"{where}: a subject needs a uri or a label")
    return name


@router.post(
    "/v1/projects/{project_id}/learn",
    status_code=204,
    openapi_extra=openapi_body(AnnifLearnRequest),
    summary="Annif learn: documents with their subjects, stored as feedback (204, as Annif answers)",
    responses=problem_responses({**RESPONSES, 404: "no such project", 503: RESPONSES[503] + ", or no model loaded"}),
)
async def learn(request: Request, project_id: str) -> Response:
    _project(request, project_id)
    out = writer(request)
    limit = request.app.state.settings.limits.max_batch_documents
    body = await parse_body(request, AnnifLearnRequest, check=_list_limit(limit))
    docs = body.root
    check_text_lengths(request, [d.text for d in docs])
    items = []
    for i, d in enumerate(docs):
        names = [_subject_name(request, s.uri, s.label, f"[{i}].subjects[{j}]") for j, s in enumerate(d.subjects)]
        if not d.text.strip() or not names:  # Annif skips such documents too; storing them teaches nothing
            continue
        items.append(
            Feedback(
                d.text,
                list(dict.fromkeys(names)),
                None if d.document_id is None else str(d.document_id),
                "annif",
                integer_id(d.document_id),
            )
        )
    if items:
        await out.write(items)
    return Response(status_code=204)


def _list_limit(limit: int):
    check = document_limit(limit, status=400)
    return lambda data: check({"documents": data})
