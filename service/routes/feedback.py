"""POST /v1/feedback and Annif's POST /v1/projects/{id}/learn: corrected documents into the feedback store.

Both sit on the admin plane (require_admin_key, as reload), and writing needs XTAG_ADMIN_KEY configured:
what is stored here becomes training data (`xtag feedback export` → `xtag update`), so holders of the
API key alone may not write it. Writes run on a writer thread of their own, those that arrive together
committed in one transaction, each with a deadline (XTAG_FEEDBACK_TIMEOUT_S): prediction has its own
threads and never waits on the database, and a slow or failing store answers 503 for feedback only.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response
from xtag.service.deps import (
    AnnifProjectDep,
    FeedbackWriterDep,
    SettingsDep,
    check_text_lengths,
    document_limit,
    openapi_body,
    parse_body,
)
from xtag.service.http.problems import Problem, problem_responses
from xtag.service.schemas import AnnifLearnRequest, FeedbackRequest, FeedbackResponse, integer_id
from xtag.service.state.feedback_store import Feedback

router = APIRouter(tags=["feedback"])


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
async def feedback(request: Request, out: FeedbackWriterDep, settings: SettingsDep) -> dict:
    body = await parse_body(request, FeedbackRequest, check=document_limit(settings.limits.max_batch_documents))
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
async def learn(request: Request, _: AnnifProjectDep, out: FeedbackWriterDep, settings: SettingsDep) -> Response:
    body = await parse_body(request, AnnifLearnRequest, check=_list_limit(settings.limits.max_batch_documents))
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
