"""The one Settings, from XTAG_* environment variables or a .env file, so one image runs anywhere; and the other
environment variables xtag reads (torchrun's, Ray's, Prometheus', COLUMNS). No module outside this one reads the
environment (models/threads.py excepted: see tests/e2e/test_layout.py)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, PrivateAttr, SecretStr, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from xtag.config.model_set import ModelSet, gather
from xtag.models.features.device import RuntimeOptions


class Server(BaseModel):
    """The HTTP server and its processes, logging and the dashboard, micro-batching and threads."""

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    workers: int = Field(1, ge=1, description="uvicorn worker processes (each holds its own model)")
    uvicorn_supervisor_pid: int | None = Field(
        None,
        description="set by `xtag serve --workers N` for its workers, not by users: the supervisor's pid, so that a "
        "worker whose bundle does not load leaves at once and an HTTP reload rolls every sibling worker",
    )
    worker_start_timeout_s: int = Field(
        300,
        ge=1,
        description="with several workers: how long a worker restarted "
        "by SIGHUP may take to load before the restart is "
        "abandoned and the old worker kept",
    )
    load_in_background: bool = Field(
        True,
        description="answer /health at once and /ready (503) until the "
        "bundle is loaded and warmed up; False = load before "
        "accepting connections (multi-worker restarts need it)",
    )
    graceful_shutdown_s: float = Field(
        8.0,
        gt=0,
        description="on SIGTERM, how long in-flight requests may take to finish before they are cancelled; "
        "keep it under the grace period before SIGKILL (docker stop: 10 s, Kubernetes: 30 s)",
    )
    drain_grace_s: float = Field(
        2.0,
        ge=0,
        description="on shutdown (SIGTERM, or a worker retired by a SIGHUP roll), how long an idle keep-alive "
        "connection stays open for a request a client may already be sending on it: such a request is served, "
        "with Connection: close, as is every response from then on; a connection still idle then is closed. "
        "At most XTAG_GRACEFUL_SHUTDOWN_S",
    )
    cors_origins: str = Field(
        "",
        description="comma-separated origins allowed to call the API from a browser (CORS); "
        "empty = no CORS headers, so browsers keep foreign pages out",
    )
    access_log: bool = Field(
        False, description="one INFO line per request (method, path, endpoint, status, ms, client) on xtag.access"
    )
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    log_format: Literal["text", "json"] = Field(
        "text",
        description="server log lines as text, or as one JSON object each with their fields (service/observability/logs.py)",
    )
    stats_window_s: float = Field(60.0, gt=0, description="window of the dashboard's QPS and percentiles")
    drift_window: int = Field(
        50_000,
        ge=100,
        description="label drift (GET /v1/drift, xtag_label_drift_js_divergence): the last this many labels "
        "returned (k per document) are compared with the training label frequencies",
    )
    threads: int | None = Field(
        None,
        ge=1,
        description="threads of each pool in the process (torch, OpenMP, BLAS, numba, onnxruntime, worker threads); "
        "default: the CPUs this process may use, its affinity mask capped by its cgroup's CPU quota (a pod's CPU "
        "limit), rounded up. Read when xtag is imported (models/threads.py), before the pools start, so it also "
        "applies to xtag train and predict; a field here so that serve refuses a bad value",
    )
    inference_threads: int | None = Field(
        None,
        ge=0,
        description="predictor calls running at once (worker threads; their compiled engines split the cores); "
        "0 = run them on the event loop itself; default: the model family's parallel_calls (models/families.py: "
        "2 for XR-Linear, 1 for encoder bundles), at most one per core",
    )
    inline_max_texts: int = Field(
        1,
        ge=0,
        description="a sequential client's request of at most this many "
        "texts runs on the event loop instead of a worker thread, "
        "saving two thread hand-offs (bench/RESULTS.md); "
        "the loop is blocked meanwhile, hence the cap; "
        "0 = never",
    )
    inline_max_chars: int = Field(
        10_000,
        ge=0,
        description="... and of at most this many characters in all: a longer text goes to a worker thread, "
        "since prediction time grows with the text and the loop must not be held for long (service/batching.py)",
    )
    batching: bool = Field(
        True,
        description="micro-batch concurrent requests into shared predictor calls "
        "(service/batching.py); throughput figures in bench/RESULTS.md",
    )
    batch_max_wait_ms: float | None = Field(
        None,
        ge=0,
        le=1000,
        description="longest a request waits for "
        "company; default: the model family's batch_wait_ms (models/families.py)",
    )
    batch_max_documents: int = Field(64, ge=1, description="texts per shared predictor call")
    gpu_batch_max_documents: int = Field(
        256,
        ge=1,
        description="texts per shared predictor call on a CUDA device, unless XTAG_BATCH_MAX_DOCUMENTS is set; "
        "a GPU default that was not measured (no GPU was lent when it was chosen)",
    )
    warmup_text: str = "warm-up prediction: a command line tool written in C to convert images"
    annif_language: str = Field("en", description="language reported for the Annif project")
    annif_uri_prefix: str = Field("", description="Annif 'uri' = this prefix + the label name")

    @property
    def cors_origin_list(self) -> list[str]:
        return [o.strip() for o in self.cors_origins.split(",") if o.strip()]


class Limits(BaseModel):
    """What one request, connection or load may ask for before it is refused."""

    max_body_bytes: int = Field(
        2 * 1024 * 1024, ge=1024, description="larger request bodies get 413 before they are read whole"
    )
    body_timeout_s: float = Field(
        15.0,
        gt=0,
        description="a request body not complete this long after its headers gets 408 and the connection is "
        "closed; bodies are read whole before a prediction request takes an XTAG_MAX_QUEUE slot",
    )
    header_timeout_s: float = Field(
        10.0,
        gt=0,
        description="a request head (request line and headers) not complete this long after the connection "
        "opened, or after its first byte on a kept-alive connection, gets 408 and the connection is closed",
    )
    max_header_bytes: int = Field(
        32 * 1024, ge=1024, description="a request head larger than this gets 431 and the connection is closed"
    )
    max_text_chars: int = Field(100_000, ge=1, description="a longer text gets 413 (not truncated)")
    max_form_fields: int = Field(
        1000,
        ge=1,
        description="most fields (multipart: parts) in a form body (Annif's suggest, which needs at most four); "
        "more get 413, counted before the form is parsed",
    )
    max_queue: int = Field(
        256,
        ge=0,
        description="prediction requests in flight at once per worker (queued or predicting); more get 503 "
        "with Retry-After at once, so a flood cannot grow latency and memory without bound; 0 = no bound",
    )
    max_batch_documents: int = Field(256, ge=1, description="most documents in one /v1/predict/batch")
    max_k: int = Field(1000, ge=1, description="largest k a request may ask for (also capped at the label count)")
    max_beam_size: int = Field(512, ge=1, description="largest beam_size a request may ask for")
    max_filter_labels: int = Field(
        1000,
        ge=0,
        description="most labels a document's `exclude` and `include` may name together, counted after their "
        "branches (label texts' `broader`); more get 422: an exclude makes the search fetch k + its size "
        "(models/inference/label_filter.py)",
    )
    max_request_cost: float = Field(
        1000.0,
        ge=0,
        description="most work one prediction request may ask for, in estimated CPU milliseconds (service/http/cost.py: "
        "documents, characters, k, beam, explain, reweight, optimize, the model's family); a costlier one gets 413 "
        "before any work starts; the default admits 256 documents at k=10 on any family (at k=100 but on LaMP), "
        "and refuses what buys seconds of CPU; 0 = no bound",
    )
    max_request_memory_mb: float = Field(
        100.0,
        ge=0,
        description="most memory one prediction request may take while it runs, in estimated MB (service/http/cost.py: "
        "its arrays, explanations and answer); a request estimated above it gets 413 before any work starts "
        "(LaMP's attention between k candidates grows with k²); 0 = no bound",
    )
    max_response_bytes: int = Field(
        8 * 1024 * 1024,
        ge=0,
        description="largest answer a prediction request may ask for, estimated before any work starts from its "
        "documents, k and explain (an explained label takes 0.5-2 KB); a larger one gets 413; 0 = no bound",
    )
    max_memory_mb: float | None = Field(
        None,
        gt=0,
        description="refuse to load a bundle (at start, reload or PUT) when the process's RSS plus the bundle's "
        "file sizes would exceed this many MB; what is served is never evicted unless XTAG_EVICT=lru; default: no limit",
    )
    evict: Literal["never", "lru"] = Field(
        "never",
        description="with XTAG_MAX_MEMORY_MB: never (load every model at start, refuse a load that does not fit) or "
        "lru (the default model and the shadows load at start, every other on its first prediction request, and "
        "the least recently used model without requests in flight is evicted to make room; see multi-model serving)",
    )
    load_wait_s: float = Field(
        30.0,
        gt=0,
        description="with XTAG_EVICT=lru: how long a request waits for its model to load before it gets 503 with "
        "Retry-After (the load goes on)",
    )

    @model_validator(mode="after")
    def _evict_needs_a_limit(self) -> Limits:
        if self.evict == "lru" and self.max_memory_mb is None:
            raise ValueError("XTAG_EVICT=lru evicts to stay under XTAG_MAX_MEMORY_MB: set it")
        return self


class Admin(BaseModel):
    """Who may call the API and the admin plane, and how often a model may be reloaded."""

    api_key: SecretStr | None = Field(
        None,
        description="require this key in X-API-Key (or Authorization: "
        "Bearer) on /v1/*; /health, /ready, /metrics stay open",
    )
    admin_key: SecretStr | None = Field(
        None,
        description="credential for /v1/admin/* in X-Admin-Key (or Authorization: Bearer); without it the admin "
        "plane is off (403: no HTTP reload, load or unload; SIGHUP reloads locally); the API key never grants it",
    )
    reload_interval_s: float = Field(
        5.0,
        ge=0,
        description="an HTTP reload or PUT of a model sooner than this after its last load (over HTTP, at start "
        "or by SIGHUP) gets 429 with Retry-After (a reload costs a whole load and warm-up of CPU beside the "
        "traffic); 0 = no limit; SIGHUP is not limited",
    )
    sighup_reload: bool = Field(True, description="reload the bundle on SIGHUP (main thread only)")

    @field_validator("api_key", "admin_key", mode="before")
    @classmethod
    def _empty_key_is_none(cls, value):
        return None if value is None or (isinstance(value, str) and not value.strip()) else value


class Feedback(BaseModel):
    """The feedback store."""

    feedback_db: str = Field(
        "xtag-feedback.sqlite3",
        description="where POST /v1/feedback and the Annif learn endpoint store documents: a SQLite file (WAL "
        "mode; relative paths from the working directory, beside .env) or a postgresql:// URL that replicas "
        "share (the postgres extra)",
    )
    feedback_timeout_s: float = Field(
        5.0, gt=0, description="a feedback write not done in this time answers 503; predictions never wait on it"
    )
    feedback_max_pending: int = Field(
        64,
        ge=1,
        description="feedback writes (requests) waiting for the store at once, queued or in its transaction; one "
        "more answers 503 with Retry-After at once. Writes that arrive together are committed together in one "
        "transaction (group commit), so a healthy store keeps this low: each client waits for its answer, and "
        "20 concurrent clients hold at most 20. The default, 64, leaves room for 64 concurrent writers; the "
        "limit bounds what a slow or stuck store can pile up (each write up to XTAG_MAX_BATCH_DOCUMENTS documents)",
    )


class Models(BaseModel):
    """Which bundles are served, from where, on which device, and their shadows."""

    bundle: Path | None = Field(None, description="bundle directory to serve (reloads re-read this path)")
    models: str | None = Field(
        None,
        description="more models served beside XTAG_BUNDLE, as NAME=PATH,NAME=PATH: each answers at "
        "/v1/models/NAME/predict and as the Annif project NAME",
    )
    models_file: Path | None = Field(
        None,
        description='a models.toml naming the models (`default = "NAME"`, and under [models] NAME = "PATH" or '
        'NAME = {path = "PATH", shadow_of = "OLD", shadow_fraction = F}; paths relative to the file); default: '
        "XTAG_BUNDLE_ROOT/models.toml when no model is named otherwise",
    )
    all_bundles: bool = Field(
        False, description="also serve every bundle directory under XTAG_BUNDLE_ROOT, by its directory name (--all)"
    )
    default_model: str | None = Field(
        None, description="the model /v1/predict, /predict and /ready answer for; default: the first one named"
    )
    shadow: str | None = Field(
        None, description="NEW=OLD,...: NEW is declared the shadow of OLD (both must be served; see shadow scoring)"
    )
    bundle_root: Path | None = Field(
        None,
        description="an HTTP reload may switch only to bundles under this directory (symlinks resolved; a "
        "relative bundle path is looked up under it, then under the working directory); "
        "default: the configured bundle's parent directory",
    )
    snapshot_dir: Path = Field(
        Path(tempfile.gettempdir()) / f"xtag-bundles-{os.getuid()}",
        description="each served bundle is copied here (owner-only, read-only) and served from the copy, so that a "
        "bundle file changed or cut short on disk can never crash the server (its model is then not ready until "
        "reloaded); the workers of one server share one copy. Default: xtag-bundles-UID in the system's temporary "
        "directory",
    )
    device: str = Field(
        "cpu",
        description="where the bundle's ONNX graphs and FAISS indexes run: cpu, cuda or cuda:N (the gpu extra); "
        "a CUDA device that cannot start fails the load, never falls back to the CPU",
    )
    tensorrt: bool = Field(
        False,
        description="with a CUDA device: onnxruntime's TensorRT provider before the CUDA one (engines are built on "
        "first use; XTAG_TENSORRT_CACHE names a folder that keeps them)",
    )
    tensorrt_cache: str | None = Field(
        None,
        description="with XTAG_TENSORRT: a folder that keeps the TensorRT engines built on first use, so that a "
        "restart reuses them; default none: each start builds them again",
    )
    encoder_threads: int = Field(
        0,
        ge=0,
        description="onnxruntime threads of each ONNX session of an encoder bundle (XR-Transformer, LightXML, "
        "CascadeXML, LaMP); read by xtag serve, predict and evaluate; default 0: XTAG_THREADS' count (the CPUs this "
        "process may use; onnxruntime's own default is the host's cores)",
    )
    shadow_fraction: str | None = Field(
        None,
        description="shadow scoring: the share of its primary's documents a shadow scores, NEW=F,... or F for every "
        "shadow (models.toml: shadow_fraction = F); a document with an id is sampled by a hash of it, so both "
        "models' figures are over the same documents whatever the server, one without by chance; default 1: all",
    )
    shadow_queue: int = Field(
        64,
        ge=1,
        description="shadow scoring: requests to a shadowed model waiting for its shadow at once (it scores them "
        "together, every 50 ms at most); one more is shed (counted in xtag_shadow_shed_documents_total), never "
        "queued: a slow shadow compares fewer documents instead of falling behind",
    )
    shadow_timeout_s: float = Field(
        5.0,
        gt=0,
        description="shadow scoring: a shadow call not done in this time counts as an error "
        "(xtag_shadow_errors_total) and is asked to stop; the primary's answer has been sent long before",
    )
    shadow_window: int = Field(
        10_000,
        ge=10,
        description="shadow scoring: agreement and live P@k are over the last this many documents compared",
    )

    @field_validator("device")
    @classmethod
    def _device_spec(cls, value: str) -> str:
        from xtag.models.features.device import Device

        return str(Device.parse(value))  # its XtagError is a ValueError: pydantic reports a bad setting


class ClusterEnvironment(BaseSettings):
    """Where this process runs beside others: the variables torchrun, Ray and prometheus-client define, read from
    the environment under their own names (not XTAG_*, not from .env) when one is made, by training/, cluster/
    and the service."""

    model_config = SettingsConfigDict(extra="ignore")

    torchelastic_run_id: str | None = Field(
        None, description="set by torchrun in each of its ranks: a rank then dies with its launcher"
    )
    rank: int = Field(0, description="torchrun: this process's rank; ranks other than 0 help train but write nothing")
    local_rank: int = Field(0, description="torchrun: this rank's GPU on its machine")
    world_size: int = Field(1, description="torchrun: ranks in all; above 1 each rank joins the process group")
    ray_address: str | None = Field(None, description="Ray's own variable: the cluster `ray.init()` joins")
    prometheus_multiproc_dir: str | None = Field(
        None,
        description="prometheus-client's multiprocess folder, where each worker of one server writes its metrics; "
        "`xtag serve --workers N` makes one (and removes it) unless it is set",
    )

    @field_validator("torchelastic_run_id", "ray_address", "prometheus_multiproc_dir", mode="before")
    @classmethod
    def _empty_is_unset(cls, value):
        return value or None

    @property
    def torchrun(self) -> bool:
        """This process is a rank of a torchrun launch."""
        return self.torchelastic_run_id is not None


PREFIX = "XTAG_"
GROUPS: dict[str, type[BaseModel]] = {
    "server": Server,
    "limits": Limits,
    "admin": Admin,
    "feedback": Feedback,
    "models": Models,
}


def flat_fields() -> dict[str, FieldInfo]:
    """Every grouped field by its flat name (max_k), the one its XTAG_* variable has (XTAG_MAX_K)."""
    return {name: field for cls in GROUPS.values() for name, field in cls.model_fields.items()}


def grouped(flat: dict) -> dict:
    """Flat values ({"max_k": 5}, as XTAG_MAX_K names them) put into their groups ({"limits": {"max_k": 5}}); a
    group given whole (a mapping or a model: `models` is both a group and XTAG_MODELS' field) is kept and a flat
    value of it wins; a name no group has is left for pydantic to ignore."""
    owner = {field: name for name, cls in GROUPS.items() for field in cls.model_fields}
    whole = {key for key, value in flat.items() if key in GROUPS and isinstance(value, dict | BaseModel)}
    out = {
        key: value.model_dump(exclude_unset=True) if isinstance(value, BaseModel) and key in whole else value
        for key, value in flat.items()
        if key in whole or key not in owner
    }
    for key, value in flat.items():
        if key in owner and key not in whole:
            out[owner[key]] = {**out.get(owner[key], {}), key: value}
    return out


class _Grouped(PydanticBaseSettingsSource):
    """One of pydantic-settings' sources, its flat values (XTAG_MAX_K, not XTAG_LIMITS__MAX_K) put into their
    groups, so that grouping the fields renamed no variable."""

    def __init__(self, settings_cls: type[BaseSettings], read):
        super().__init__(settings_cls)
        self._read = read  # () -> the source's values, by flat field name

    def get_field_value(self, field, field_name):  # __call__ reads every group at once
        return None, field_name, False

    def __call__(self) -> dict:
        return grouped(self._read())


class Settings(BaseSettings):
    """Every setting of xtag, grouped by concern; each read from its XTAG_* variable (the group is not part of the
    name: XTAG_MAX_K is settings.limits.max_k) or .env. Keyword arguments name fields flat, as the variables do
    (`Settings(bundle=..., max_k=5)`), or give a group whole."""

    model_config = SettingsConfigDict(env_prefix=PREFIX, env_file=".env", extra="ignore")

    server: Server = Field(default_factory=Server)
    limits: Limits = Field(default_factory=Limits)
    admin: Admin = Field(default_factory=Admin)
    feedback: Feedback = Field(default_factory=Feedback)
    models: Models = Field(default_factory=Models)
    cluster: ClusterEnvironment = Field(default_factory=ClusterEnvironment)

    _model_set: ModelSet = PrivateAttr(default_factory=ModelSet)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Keyword arguments over XTAG_* variables over .env, as before the grouping; each group read under the
        flat names. `_env_file=None` (dotenv_settings.env_file) still turns .env off."""
        env_file = getattr(dotenv_settings, "env_file", None)

        def each_group(source: type[PydanticBaseSettingsSource], **options):
            def read() -> dict:
                found = [
                    (cls, source(cls, case_sensitive=False, env_prefix=PREFIX, **options)()) for cls in GROUPS.values()
                ]
                return {k: v for cls, values in found for k, v in values.items() if k in cls.model_fields}

            return read

        return (
            _Grouped(settings_cls, init_settings),
            _Grouped(settings_cls, each_group(EnvSettingsSource)),
            _Grouped(settings_cls, each_group(DotEnvSettingsSource, env_file=env_file)),
        )

    @model_validator(mode="before")
    @classmethod
    def _flat_keywords(cls, data):
        return grouped(data) if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _gather_models(self) -> Settings:
        m = self.models
        self._model_set = gather(
            m.bundle,
            m.models,
            m.models_file,
            m.bundle_root,
            m.all_bundles,
            m.default_model,
            m.shadow,
            m.shadow_fraction,
        )
        return self

    @property
    def model_set(self) -> ModelSet:
        """The models to serve, checked (config/model_set.py)."""
        return self._model_set

    def runtime_options(self) -> RuntimeOptions:
        """What load_bundle needs of these settings beside the device (models/ reads no environment)."""
        return RuntimeOptions(encoder_threads=self.models.encoder_threads, tensorrt_cache=self.models.tensorrt_cache)

    @property
    def effective_batch_max_documents(self) -> int:
        """batch_max_documents, or the GPU default on a CUDA device when it was not set explicitly."""
        if self.models.device.startswith("cuda") and "batch_max_documents" not in self.server.model_fields_set:
            return self.server.gpu_batch_max_documents
        return self.server.batch_max_documents

    def reload_root(self, resolve: bool = True) -> Path | None:
        """The directory HTTP reloads must stay under: XTAG_BUNDLE_ROOT, else the configured bundle's parent
        (symlinks resolved, or with resolve=False as configured, made absolute); the first model's parent when there
        are several."""
        first = self.model_set.models[0].path if self.model_set.models else None
        root = self.models.bundle_root or (Path(first).parent if first is not None else None)
        if root is None:
            return None
        return Path(root).resolve() if resolve else Path(os.path.abspath(root))


# The environment's other conventions, read (and written for child processes) here only: the CLI, the service,
# training and cluster/ ask this module, so that no module elsewhere reads os.environ (tests/e2e/test_layout.py
# fails on one that does).

WORKER_SETTINGS = "XTAG_WORKER_SETTINGS"  # the supervisor's Settings, as one JSON object, for its uvicorn workers


def help_width_given() -> bool:
    """COLUMNS is set: the user chose the help's width, so the CLI keeps out of it."""
    return "COLUMNS" in os.environ


def hand_to_workers(settings: Settings, supervisor_pid: int) -> str | None:
    """Put what uvicorn's workers need in this process's environment, which they inherit: the settings set
    explicitly, as one JSON object (a worker derives the rest as the supervisor did, e.g. the GPU batch size when
    batch_max_documents was not given), the supervisor's pid, and a Prometheus folder unless one is set. Returns
    the folder made here, for the caller to remove."""
    given = settings.model_dump(mode="json", exclude_none=True, exclude_unset=True, exclude={"cluster"})
    admin = given.get("admin", {})
    for name in ("api_key", "admin_key"):
        if name in admin:  # model_dump masks secrets; the workers need them whole
            admin[name] = getattr(settings.admin, name).get_secret_value()
    given.setdefault("server", {})["uvicorn_supervisor_pid"] = supervisor_pid
    os.environ[WORKER_SETTINGS] = json.dumps(given)
    if settings.cluster.prometheus_multiproc_dir:
        return None
    made = os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="xtag-prometheus-")
    return made


def worker_settings() -> Settings:
    """A uvicorn worker's Settings: its supervisor's (hand_to_workers), over XTAG_* variables and .env as usual."""
    return Settings(**json.loads(os.environ.get(WORKER_SETTINGS, "{}")))
