"""Request and response payloads of the HTTP API (pydantic v2, unknown fields rejected)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    RootModel,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    model_validator,
)
from xtag.config.rollout_policy import RolloutPolicy


def not_blank(text: str) -> str:
    if not text.strip():
        raise ValueError("text is empty or whitespace only")
    return text


# The blank check stays a validator (its message is clearer than a failed pattern); the schema states
# the same rule as minLength + pattern so that clients and schema-driven tools know it. The pattern spells out
# the characters str.strip() removes (str.isspace): a regex's \s differs (it lacks U+001C-U+001F and U+0085 and
# has U+FEFF), and schemathesis found a text of U+001D that the schema admitted and the server refused (issue 38).
SPACE = "\\t\\n\\x0b\\x0c\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
NOT_BLANK = {"minLength": 1, "pattern": f"[^{SPACE}]"}
Text = Annotated[
    StrictStr,
    AfterValidator(not_blank),
    Field(
        description="the document to tag (not blank); longer than XTAG_MAX_TEXT_CHARS gets 413",
        json_schema_extra=NOT_BLANK,
    ),
]


def _integral(value: object) -> object:
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _string_or_integer(value: object) -> object:
    """Ids are strings or exact integers. A float is refused even when integral: `1e3` is not the id "1000", and
    an integer that went through a float collides with its neighbours (2^64+1 and 2^64+2 are one float)."""
    if isinstance(value, float):
        raise ValueError(f"must be a string or an integer, not the number {value!r} (send ids as strings or integers)")
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f"must be a string or an integer, not {type(value).__name__}")
    return value


class IntegerText(str):
    """A JSON integer longer than Python's int() takes (sys.get_int_max_str_digits, 4,300 digits by default: a guard
    against its quadratic conversion), kept as its text; an id of this type is an integer id (service/deps.py)."""


def _keep_integer_text(value: object, handler: ValidatorFunctionWrapHandler) -> object:
    return value if isinstance(value, IntegerText) else handler(value)


def integer_id(value: object) -> bool:
    """Whether a validated id was sent as a JSON integer (123), not as a string ("123"): two different ids."""
    return isinstance(value, int | IntegerText)


# A document's id, echoed back (or stored) as a string. service/deps.py reads integers beyond 64 bits exactly, and
# those beyond int()'s digit limit as IntegerText, which passes as is (the wrap validator runs first).
DocumentId = Annotated[StrictStr | StrictInt, BeforeValidator(_string_or_integer), WrapValidator(_keep_integer_text)]


# A label, as answers name it: its `id` (an integer, the position in the model's vocabulary) or its `name` (a string).
LabelRef = Annotated[StrictStr | StrictInt, BeforeValidator(_string_or_integer)]
LABEL_FILTER = (
    "labels as answers name them: `id` (integer) or `name` (string); with the bundle's label texts a label with "
    "narrower labels (`broader` in its label file) stands for its whole branch; unknown labels get 422; at most "
    "XTAG_MAX_FILTER_LABELS labels after the branches"
)
LabelRefs = Annotated[list[LabelRef], Field(description=LABEL_FILTER)]


class LabelFilterFields(BaseModel):
    """`exclude` and `include` (models/inference/label_filter.py): the top k among the labels they allow."""

    exclude: LabelRefs | None = Field(None, description="labels never returned; " + LABEL_FILTER)
    include: LabelRefs | None = Field(
        None,
        description="only these labels may be returned (fewer than k allowed: the answer has fewer labels); "
        + LABEL_FILTER,
    )


# JSON Schema's integer: 183.0 is the integer 183 (JSON has one number type); 183.5, "183" and true are not.
# Constraints go before the conversion, or pydantic cannot state them as minimum/maximum in the schema.
Integer = Annotated[StrictInt, BeforeValidator(_integral)]
PositiveInteger = Annotated[StrictInt, Field(ge=1), BeforeValidator(_integral)]
# One strict float type (ints accepted, bools and strings not) rather than a StrictFloat | StrictInt
# union: pydantic cannot push ge/le into a union's members and emits them as non-standard `ge`/`le`
# keys that JSON Schema tools ignore; on a single type they become minimum/maximum.
Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Reweight(Strict):
    """Macro-aware re-ranking by gains a_j·η_j (thesis eq. 4.21); see models/inference/reweighting.py.

    The beam is widened (k' = max(5k, 50) candidates, beam ×2), the candidates are ordered by gain
    and cut to k; each label keeps its model score η, so `score` need not decrease down the list.
    """

    # beta is refused for the other schemes (models/inference/reweighting.py); the schema says so, as schemathesis asks (ST202)
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [{"properties": {"scheme": {"const": "power"}}}, {"properties": {"beta": {"type": "null"}}}]
        }
    )

    scheme: Literal["psp", "power", "macro-recall"]
    alpha: Annotated[Number, Field(ge=0.0, le=1.0, description="0 = plain scores, 1 = pure scheme")]
    beta: (
        Annotated[
            Number, Field(ge=0.0, le=10.0, description="exponent of the 'power' scheme (default 0.5); only for 'power'")
        ]
        | None
    ) = None

    @model_validator(mode="after")
    def _beta_only_with_power(self) -> Reweight:
        # checked here, not only where the weights are made: alpha 0 makes none, and beta slipped through (issue 47)
        if self.beta is not None and self.scheme != "power":
            raise ValueError(f"beta only applies to the 'power' scheme, not {self.scheme!r}: leave it out")
        return self


class PredictOptions(Strict, LabelFilterFields):
    k: Annotated[PositiveInteger, Field(description="labels per document (default 10, at most the label count)")] = 10
    beam_size: Annotated[PositiveInteger, Field(description="beam width (default: the bundle's)")] | None = None
    threshold: (
        Annotated[
            Number,
            Field(ge=0.0, le=1.0, description="drop labels whose model score is below this (after any re-ranking)"),
        ]
        | None
    ) = None
    reweight: Reweight | None = None
    explain: StrictBool = Field(
        False,
        description="add an `explanation` to each returned label: the words that raised its score (bundles with "
        "TF-IDF features: XR-Linear, XR-Transformer) and, for a LaMP bundle, the words it attended to and the other "
        "returned labels that weighed most in its update; LightXML and CascadeXML answer 422 explain-unavailable",
    )
    rerank: StrictBool = Field(
        True,
        description="false: a re-ranking bundle (model kind lamp) answers with its first stage alone, skipping "
        "the second stage; other bundles ignore it",
    )
    label_text: StrictBool = Field(
        False,
        description="add each returned label's `label` (its name from the bundle's label file, else its id) and "
        "`description` (null when it has none)",
    )


class PredictRequest(PredictOptions):
    text: Text


class BatchDocument(Strict, LabelFilterFields):
    """A document, with its own `exclude` (added to the request's) and `include` (in place of the request's)."""

    id: DocumentId | None = Field(
        None, description='echoed back as a string (7 → "7"); default: the position, as a string ("0", "1", …)'
    )
    text: Text


class Optimize(Strict):
    """Batch-level optimal macro inference (thesis §4.3–4.4, models/inference/macro_optimal.py).

    The batch's top-k sets are chosen jointly to maximise (1 − alpha)·P@k + alpha·metric over the
    batch's own documents (BCA in the ETU setting, or Frank-Wolfe in the PU setting); best on a
    calibrated bundle (`xtag calibrate`). The served schema adds this server's limits (service/http/openapi_limits.py).
    """

    metric: Literal["macro-f1", "macro-recall"]
    alpha: Annotated[Number, Field(ge=0.0, le=1.0, description="0 = plain top-k, 1 = the macro metric only")] = 1.0
    method: Literal["bca", "fw"] = "bca"


class BatchRequest(PredictOptions):
    # `reweight` and `optimize` are alternatives (routes/predict.py answers 422 to both): the schema says so too, so
    # that a client generated from it, or a fuzzer, does not take both together for a valid request (issue 38).
    model_config = ConfigDict(
        json_schema_extra={
            "not": {
                "required": ["optimize", "reweight"],
                "properties": {"optimize": {"type": "object"}, "reweight": {"type": "object"}},
            }
        }
    )

    documents: Annotated[list[BatchDocument], Field(min_length=1, description="at most XTAG_MAX_BATCH_DOCUMENTS")]
    optimize: Optimize | None = Field(
        None, description="choose the batch's top-k sets for a macro metric; not with reweight"
    )


class TermShare(BaseModel):
    term: str = Field(description="a word or word n-gram of the text, as the TF-IDF featuriser saw it (lowercased)")
    contribution: float = Field(description="its TF-IDF value × the ranker weight (summed over levels in `words`)")


class LevelExplanation(BaseModel):
    """One tree level on the label's path: bias + Σ terms + other_terms + dense = margin (within rounding)."""

    level: int = Field(description="1 = the root's children; the last level is the label itself")
    node: int = Field(description="the label's ancestor at this level (a cluster of labels, or the label)")
    margin: float = Field(description="the ranker's raw score w·x + b, before the post-processor")
    score: float = Field(description="the post-processed margin; their product along the path is `path_score`")
    bias: float
    terms: list[TermShare] = Field(description="this level's largest positive term contributions, largest first")
    other_terms: float = Field(description="what the text's other terms add (negative ones included)")
    dense: float | None = Field(description="Φ_cat's embedding block, as one number; null without one")


class AttendedWord(BaseModel):
    term: str = Field(description="a word of the text (lowercased), its sub-word tokens merged")
    weight: float = Field(
        ge=0, le=1, description="its share of the label's attention over the text's tokens (heads averaged)"
    )


class SupportingLabel(BaseModel):
    id: int
    name: str
    weight: float = Field(ge=0, le=1, description="its share of the label's attention over the re-scored candidates")


class Explanation(BaseModel):
    """Why a label was returned (models/explain/linear.py). `words`, `path_score` and `levels` explain a linear ranker's
    score over TF-IDF features: the bundle's, or a LaMP bundle's first stage (why the label became a candidate),
    absent when that first stage has none. A LaMP bundle adds `attended_words` and `supporting_labels` from its
    last message-passing step (models/explain/lamp.py)."""

    words: list[TermShare] | None = Field(
        None, description="the terms that raised the label's score most over its whole path"
    )
    path_score: float | None = Field(
        None,
        description="the product of the levels' scores: the engine's score, before the monotone maps that give "
        "`score` (models/xlinear/readable.py, a calibration); a LaMP bundle's first stage's score",
    )
    levels: list[LevelExplanation] | None = None
    attended_words: list[AttendedWord] | None = Field(
        None,
        description="LaMP: the words of the text the label attended to most (feature-to-label attention), "
        "largest first",
    )
    supporting_labels: list[SupportingLabel] | None = Field(
        None,
        description="LaMP: the other returned labels that weighed most in its update (label-to-label attention), "
        "largest first; never the label itself",
    )
    note: str | None = Field(
        None,
        description="why a part is missing, e.g. a LaMP bundle exported before its graph had attention outputs",
    )


LABEL_NAME = "the label's name from the bundle's label file (docs/label-files.md), else its id"


class LabelScore(BaseModel):
    id: int
    name: str = Field(description="the label's id: the string the training corpus names it by")
    label: str | None = Field(None, description=f"only with `label_text: true`: {LABEL_NAME}; absent otherwise")
    description: str | None = Field(
        None,
        description="only with `label_text: true`: the label's description from the bundle's label file, null "
        "when it has none; absent otherwise",
    )
    score: float = Field(
        description="the model's score (calibrated when the bundle is); with `reweight` the labels are ordered by "
        "gain a_j·score, so this need not decrease down the list"
    )
    gain: float | None = Field(
        None,
        description="only with `reweight`: the gain a_j·score the labels are ordered by (it decreases down the "
        "list); absent otherwise",
    )
    explanation: Explanation | None = Field(None, description="only with `explain: true`; absent otherwise")


class ModelRef(BaseModel):
    name: str = Field(description="the bundle's name")
    version: str = Field(description="the bundle's version (its manifest's)")
    served_version: str = Field(
        description="the version of the served model that answered (ROOT/NAME/VERSION/, or models.toml's versions "
        'table; "1" for a model served from one bundle), as in the X-Model-Version header'
    )


class PredictResponse(BaseModel):
    labels: list[LabelScore]
    model: ModelRef
    took_ms: float


class BatchResult(BaseModel):
    id: str = Field(description="the document's id, or its position in `documents`, always as a string")
    labels: list[LabelScore]


class BatchResponse(BaseModel):
    results: list[BatchResult]
    model: ModelRef
    took_ms: float


class LabelInfo(BaseModel):
    """A label of the served model; the fields of its label file only when the bundle has one and says them."""

    id: int
    name: str = Field(description="the label's id: the string the training corpus names it by")
    frequency: int
    label: str | None = Field(None, description="its name, from the bundle's label file; absent when none")
    description: str | None = Field(None, description="from the bundle's label file; absent when none")
    alt_labels: list[str] | None = Field(None, description="its other names, from the label file; absent when none")
    broader: list[str] | None = Field(
        None, description="the ids (`name`) of its broader labels, from the label file; absent when none"
    )


class LabelsPage(BaseModel):
    total: int
    offset: int
    limit: int
    labels: list[LabelInfo]


class RelatedLabel(BaseModel):
    id: int
    name: str
    score: float = Field(description="the cosine of the two labels' text embeddings")


class RelatedLabels(BaseModel):
    id: int
    name: str
    related: list[RelatedLabel] = Field(description="nearest first; empty for a label with no text")


class ModelInfo(BaseModel):
    name: str
    version: str
    kind: str
    path: str = Field(description="the bundle's directory name (never the absolute path)")
    label_count: int
    default_beam_size: int
    load_seconds: float
    warmup_ms: float
    loaded_at: float
    manifest: dict
    runtime: dict = Field(
        default_factory=dict,
        description="where the bundle runs: `device` (cpu, cuda:N) and `placement`, each component's onnxruntime "
        "provider (CPUExecutionProvider, CUDAExecutionProvider, ...) or FAISS/ranker device",
    )


class ReloadRequest(Strict):
    bundle: StrictStr | None = Field(
        None,
        min_length=1,
        description="bundle directory to switch to, under XTAG_BUNDLE_ROOT (default: the configured one, "
        "re-read); a relative path is looked up under the root, then under the server's working directory; "
        "needs XTAG_ADMIN_KEY and a single worker",
    )


class ModelPutRequest(Strict):
    bundle: StrictStr = Field(
        min_length=1,
        description="bundle directory to serve under this name, under XTAG_BUNDLE_ROOT (a relative path is looked "
        "up under the root, then under the server's working directory); needs XTAG_ADMIN_KEY and a single worker",
    )


Reason = Annotated[StrictStr | None, Field(max_length=500, description="said in the log line of the change")]


class TrafficRequest(Strict):
    weights: dict[str, Annotated[StrictInt, Field(ge=0, le=100)]] = Field(
        max_length=64,
        description="each version's share of the model's requests in whole percents, summing to 100 (versions "
        "left out get 0); a version given weight must be loaded and ready",
    )
    reason: Reason = None


class PromoteRequest(Strict):
    version: StrictStr = Field(
        min_length=1, max_length=64, description="the version that takes all the traffic and becomes stable"
    )
    reason: Reason = None


class RollbackRequest(Strict):
    reason: Reason = None


class TrafficResponse(BaseModel):
    model: str
    action: Literal["weights", "promote", "rollback"] | None = Field(
        description="the change just made (none for a read)"
    )
    stable: str = Field(description="the stable version: a rollback returns all traffic to it")
    weights: dict[str, int] = Field(description="each version's share of the requests, in percent")
    previous_stable: str | None = Field(description="where a rollback goes once the stable version has all traffic")
    held_by: str | None = Field(description="the rollout policy that owns the traffic now, if any")


class RolloutResponse(BaseModel):
    """A model's latest rollout and where it stands (service/rollout/policy.py)."""

    model: str
    version: str = Field(description="the version rolled out (the canary)")
    stable: str = Field(description="the version it started from: a rollback returns all traffic to it")
    state: Literal["waiting", "running", "promoted", "rolled_back", "stopped"] = Field(
        description="waiting: for the canary to load; running: a step holds; the others are final"
    )
    step: int = Field(description="the step in force, from 1 (0 before the first)")
    steps: list[int] = Field(description="the canary's percent of traffic at each step")
    canary_percent: int = Field(description="the canary's share of the traffic now (0 once it ended)")
    started: float = Field(description="when it started, Unix seconds")
    reason: str | None = Field(description="why it rolled back or stopped")
    gates: dict = Field(description="the last judgement: each version's window, the bounds, the gate that failed")
    policy: dict = Field(description="the policy it runs")


class ReloadResponse(BaseModel):
    status: Literal["reloaded", "unchanged"]
    model: ModelRef
    previous: ModelRef | None
    took_ms: float


class AnnifBatchDocument(Strict):
    text: StrictStr
    document_id: DocumentId | None = Field(None, description="echoed back as a string; null when absent")


class AnnifBatchRequest(Strict):
    documents: Annotated[list[AnnifBatchDocument], Field(min_length=1)]


def _storable(value: object) -> object:
    """Both feedback stores must take the same input: PostgreSQL's text cannot hold NUL (SQLite's can), so a NUL
    is refused here, as a 422 naming the field, instead of one store keeping what the other answers 503 to."""
    if isinstance(value, str) and "\x00" in value:
        raise ValueError("holds a NUL character (\\u0000), which the feedback store cannot keep")
    return value


NO_NUL = {"pattern": r"^[^\u0000]*$"}
NOT_BLANK_NO_NUL = {"minLength": 1, "pattern": f"^[^\\u0000]*[^{SPACE}\\u0000][^\\u0000]*$"}
StoredString = Annotated[StrictStr, AfterValidator(_storable), Field(json_schema_extra=NO_NUL)]
StoredId = Annotated[
    Annotated[StrictStr, Field(json_schema_extra=NO_NUL)] | StrictInt,
    BeforeValidator(_string_or_integer),
    AfterValidator(_storable),
    WrapValidator(_keep_integer_text),
]
StoredText = Annotated[
    StrictStr,
    AfterValidator(not_blank),
    AfterValidator(_storable),
    Field(
        description="the document (not blank, no NUL character); longer than XTAG_MAX_TEXT_CHARS gets 413",
        json_schema_extra=NOT_BLANK_NO_NUL,
    ),
]
LabelName = Annotated[
    StrictStr, AfterValidator(not_blank), AfterValidator(_storable), Field(json_schema_extra=NOT_BLANK_NO_NUL)
]


class FeedbackDocument(Strict):
    id: StoredId | None = Field(
        None,
        description="client id: a document sent again with an id already stored is not stored twice "
        "(retries are safe); a string or an integer (kept exact, stored as a string), never a float",
    )
    text: StoredText
    labels: Annotated[
        list[LabelName],
        Field(min_length=1, description="the correct label names, including names the model has never seen"),
    ]


class FeedbackRequest(Strict):
    documents: Annotated[list[FeedbackDocument], Field(min_length=1, description="at most XTAG_MAX_BATCH_DOCUMENTS")]


class FeedbackResponse(BaseModel):
    stored: int = Field(description="documents written now")
    duplicates: int = Field(description="documents whose id was already stored (left as they were)")


class AnnifSubject(Strict):
    uri: StoredString | None = None
    label: StoredString | None = None


class AnnifLearnDocument(Strict):
    text: StoredString
    subjects: list[AnnifSubject]
    document_id: StoredId | None = Field(None, description="xtag extension: a client id, as in /v1/feedback")


class AnnifLearnRequest(RootModel[Annotated[list[AnnifLearnDocument], Field(min_length=1)]]):
    """Annif's learn body: a JSON array of documents with their subjects."""


REQUEST_MODELS: tuple[type[BaseModel], ...] = (
    PredictRequest,
    BatchRequest,
    ReloadRequest,
    ModelPutRequest,
    TrafficRequest,
    PromoteRequest,
    RollbackRequest,
    RolloutPolicy,
    AnnifBatchRequest,
    FeedbackRequest,
    AnnifLearnRequest,
)


class ProblemDetails(BaseModel):
    """RFC 9457 body of every error (service/http/problems.py); `errors` lists the fields of a 422."""

    model_config = ConfigDict(extra="allow", title="Problem")

    type: str = Field(description="urn:xtag:problem:<slug>")
    title: str
    status: int
    detail: str
    instance: str | None = None
