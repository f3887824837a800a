"""The served OpenAPI document states the limits and the credentials this server enforces, from its settings.

The pydantic models describe a request in general; what this server admits depends on XTAG_* settings and the
served model (k: at most XTAG_MAX_K and the label count; beam_size: XTAG_MAX_BEAM_SIZE; documents:
XTAG_MAX_BATCH_DOCUMENTS; text: XTAG_MAX_TEXT_CHARS). Without those maxima a schema-driven client or fuzzer sends
k = 2,062,983 as schema-valid and gets a 422 (schemathesis ST202, issue 38). Likewise the X-API-Key and
X-Admin-Key security schemes are declared only where the server asks for them, so a client generated from the
document does not demand a key no one configured. app.custom_openapi applies this to the generated document,
which is rebuilt when the served model changes (its label count bounds k).
"""

from __future__ import annotations

from xtag.config.model_set import NAME_PATTERN
from xtag.config.settings import Settings
from xtag.models.inference.macro_optimal import SERVING_MAX_DOCS, SERVING_MAX_SECONDS

API_KEY, ADMIN_KEY = "APIKeyHeader", "AdminKeyHeader"  # the schemes' names (service/deps.py)
BATCHES = ("BatchRequest", "AnnifBatchRequest", "FeedbackRequest")  # `documents` bounded by max_batch_documents
TEXTS = ("PredictRequest", "BatchDocument", "AnnifBatchDocument", "FeedbackDocument")


def apply_limits(schema: dict, settings: Settings, n_labels: int | None) -> dict:
    """`schema` with the enforced maxima and only the security schemes in force (changed in place)."""
    components = schema.get("components", {}).get("schemas", {})
    k_max = settings.limits.max_k if n_labels is None else min(settings.limits.max_k, n_labels)
    for name in ("PredictRequest", "BatchRequest"):
        props = components[name]["properties"]
        props["k"]["maximum"] = k_max
        _integer_branch(props["beam_size"])["maximum"] = settings.limits.max_beam_size
    for name in BATCHES:
        components[name]["properties"]["documents"]["maxItems"] = settings.limits.max_batch_documents
    for name in TEXTS:
        components[name]["properties"]["text"]["maxLength"] = settings.limits.max_text_chars
    optimize = components["Optimize"]
    most = min(settings.limits.max_batch_documents, SERVING_MAX_DOCS)
    optimize["description"] = (
        optimize.get("description", "").rstrip()
        + f"\n\nLimits: at most {most} documents (XTAG_MAX_BATCH_DOCUMENTS={settings.limits.max_batch_documents}, and "
        f"never more than {SERVING_MAX_DOCS}) and {SERVING_MAX_SECONDS:g} s of optimisation per request."
    )
    _annif_limits(schema.get("paths", {}), k_max)
    _name_patterns(schema.get("paths", {}))
    _security_in_force(schema, settings)
    return schema


def _name_patterns(paths: dict) -> None:
    """A model's name in a path ({name}, Annif's {project_id}) and a version's ({version}) obey the pattern every
    model and version name obeys (config/model_set.py); stated here because pydantic's regex engine has no
    look-ahead (the "no ..")."""
    for item in paths.values():
        for operation in item.values():
            for parameter in operation.get("parameters", []):
                if parameter.get("in") == "path" and parameter.get("name") in ("name", "project_id", "version"):
                    parameter["schema"]["pattern"] = NAME_PATTERN


def _integer_branch(prop: dict) -> dict:
    """The integer schema of an optional integer property (pydantic: anyOf [integer, null])."""
    return next((s for s in prop.get("anyOf", []) if s.get("type") == "integer"), prop)


def _annif_limits(paths: dict, k_max: int) -> None:
    """Annif's `limit` (a form field of suggest, a query parameter of suggest-batch) is bounded like k."""
    for path, item in paths.items():
        if not path.startswith("/v1/projects/"):
            continue
        for operation in item.values():
            for parameter in operation.get("parameters", []):
                if parameter.get("name") == "limit":
                    parameter["schema"]["maximum"] = k_max
            for content in operation.get("requestBody", {}).get("content", {}).values():
                limit = content.get("schema", {}).get("properties", {}).get("limit")
                if limit is not None:
                    limit["maximum"] = k_max


def _security_in_force(schema: dict, settings: Settings) -> None:
    """Keep X-API-Key only when XTAG_API_KEY is set; X-Admin-Key only when XTAG_ADMIN_KEY is (without it the
    admin routes are off, 403, whatever key is sent: service/deps.require_admin_key)."""
    in_force = {name for name, key in ((API_KEY, settings.admin.api_key), (ADMIN_KEY, settings.admin.admin_key)) if key}
    for item in schema.get("paths", {}).values():
        for operation in item.values():
            kept: list[dict] = []
            for requirement in operation.get("security", []):
                names = sorted(set(requirement) & in_force)
                if names and {n: [] for n in names} not in kept:
                    kept.append({n: [] for n in names})
            if kept:
                operation["security"] = kept
            else:
                operation.pop("security", None)
    components = schema.get("components", {})
    schemes = {n: s for n, s in components.get("securitySchemes", {}).items() if n in in_force}
    if schemes:
        components["securitySchemes"] = schemes
    else:
        components.pop("securitySchemes", None)
