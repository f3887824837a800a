"""Service settings from XTAG_* environment variables or a .env file, so one image runs anywhere."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Literal

from pydantic import Field, PrivateAttr, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from xtag.models.features.device import RuntimeOptions
from xtag.service.model_config import ModelSet, gather


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="XTAG_", env_file=".env", extra="ignore")

    bundle: Path | None = Field(None, description="bundle directory to serve (reloads re-read this path)")
    models: str | None = Field(
        None,
        description="more models served beside XTAG_BUNDLE, as NAME=PATH,NAME=PATH: each answers at "
        "/v1/models/NAME/predict and as the Annif project NAME",
    )
    models_file: Path | None = Field(
        None,
        description='a models.toml naming the models (`default = "NAME"`, and under [models] NAME = "PATH" or '
        'NAME = {path = "PATH", shadow_of = "OLD"}; paths relative to the file); default: '
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
    max_memory_mb: float | None = Field(
        None,
        gt=0,
        description="refuse to load a bundle (at start, reload or PUT) when the process's RSS plus the bundle's "
        "file sizes would exceed this many MB; what is served is never evicted; default: no limit",
    )
    snapshot_dir: Path = Field(
        Path(tempfile.gettempdir()) / f"xtag-bundles-{os.getuid()}",
        description="each served bundle is copied here (owner-only, read-only) and served from the copy, so that a "
        "bundle file changed or cut short on disk can never crash the server (its model is then not ready until "
        "reloaded); the workers of one server share one copy. Default: xtag-bundles-UID in the system's temporary "
        "directory",
    )
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    workers: int = Field(1, ge=1, description="uvicorn worker processes (each holds its own model)")
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
    bundle_root: Path | None = Field(
        None,
        description="an HTTP reload may switch only to bundles under this directory (symlinks resolved; a "
        "relative bundle path is looked up under it, then under the working directory); "
        "default: the configured bundle's parent directory",
    )
    cors_origins: str = Field(
        "",
        description="comma-separated origins allowed to call the API from a browser (CORS); "
        "empty = no CORS headers, so browsers keep foreign pages out",
    )
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
    max_batch_documents: int = Field(256, ge=1, description="most documents in one /v1/predict/batch")
    max_k: int = Field(1000, ge=1, description="largest k a request may ask for (also capped at the label count)")
    max_beam_size: int = Field(512, ge=1, description="largest beam_size a request may ask for")
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
        "CascadeXML, LaMP); read by xtag serve, predict and evaluate; default 0: onnxruntime's own (one per core)",
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
    load_in_background: bool = Field(
        True,
        description="answer /health at once and /ready (503) until the "
        "bundle is loaded and warmed up; False = load before "
        "accepting connections (multi-worker restarts need it)",
    )
    worker_start_timeout_s: int = Field(
        300,
        ge=1,
        description="with several workers: how long a worker restarted "
        "by SIGHUP may take to load before the restart is "
        "abandoned and the old worker kept",
    )
    uvicorn_supervisor_pid: int | None = Field(
        None,
        description="set by `xtag serve --workers N` for its workers, not by users: the supervisor's pid, so that a "
        "worker whose bundle does not load leaves at once and an HTTP reload rolls every sibling worker",
    )
    warmup_text: str = "warm-up prediction: a command line tool written in C to convert images"
    sighup_reload: bool = Field(True, description="reload the bundle on SIGHUP (main thread only)")
    stats_window_s: float = Field(60.0, gt=0, description="window of the dashboard's QPS and percentiles")
    drift_window: int = Field(
        50_000,
        ge=100,
        description="label drift (GET /v1/drift, xtag_label_drift_js_divergence): the last this many labels "
        "returned (k per document) are compared with the training label frequencies",
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
    access_log: bool = Field(
        False, description="one INFO line per request (method, path, endpoint, status, ms, client) on xtag.access"
    )
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    log_format: Literal["text", "json"] = Field(
        "text",
        description="server log lines as text, or as one JSON object each with their fields (service/observability/logs.py)",
    )
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
    annif_language: str = Field("en", description="language reported for the Annif project")
    annif_uri_prefix: str = Field("", description="Annif 'uri' = this prefix + the label name")

    _model_set: ModelSet = PrivateAttr(default_factory=ModelSet)

    @model_validator(mode="after")
    def _gather_models(self) -> Settings:
        root = self.bundle_root
        self._model_set = gather(
            self.bundle, self.models, self.models_file, root, self.all_bundles, self.default_model, self.shadow
        )
        return self

    @property
    def model_set(self) -> ModelSet:
        """The models to serve, checked (service/model_config.py)."""
        return self._model_set

    @field_validator("device")
    @classmethod
    def _device_spec(cls, value: str) -> str:
        from xtag.models.features.device import Device

        return str(Device.parse(value))  # its XtagError is a ValueError: pydantic reports a bad setting

    def runtime_options(self) -> RuntimeOptions:
        """What load_bundle needs of these settings beside the device (models/ reads no environment)."""
        return RuntimeOptions(encoder_threads=self.encoder_threads, tensorrt_cache=self.tensorrt_cache)

    @property
    def effective_batch_max_documents(self) -> int:
        """batch_max_documents, or the GPU default on a CUDA device when it was not set explicitly."""
        if self.device.startswith("cuda") and "batch_max_documents" not in self.model_fields_set:
            return self.gpu_batch_max_documents
        return self.batch_max_documents

    @field_validator("api_key", "admin_key", mode="before")
    @classmethod
    def _empty_key_is_none(cls, value):
        return None if value is None or (isinstance(value, str) and not value.strip()) else value

    @property
    def cors_origin_list(self) -> list[str]:
        return [o.strip() for o in self.cors_origins.split(",") if o.strip()]

    def reload_root(self, resolve: bool = True) -> Path | None:
        """The directory HTTP reloads must stay under: XTAG_BUNDLE_ROOT, else the configured bundle's parent
        (symlinks resolved, or with resolve=False as configured, made absolute); the first model's parent when there
        are several."""
        first = self.model_set.models[0].path if self.model_set.models else None
        root = self.bundle_root or (Path(first).parent if first is not None else None)
        if root is None:
            return None
        return Path(root).resolve() if resolve else Path(os.path.abspath(root))
