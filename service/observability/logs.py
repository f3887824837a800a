"""The server's log: one stderr handler for xtag's and uvicorn's loggers, as text or as JSON lines.

Without a handler the `xtag.service` logger's INFO lines (bundle loaded, reloads) were dropped: Python's
last-resort handler prints WARNING and above only. `log_config` is handed to uvicorn (server.py), which
applies it in the supervisor and again in each worker process. Root is left alone, so an embedding
application (or pytest's capture) keeps its own handlers; xtag's records still propagate to it.

JSON lines (XTAG_LOG_FORMAT=json) carry `time`, `level`, `logger`, `message` and any fields a call passes
in `extra=` (the load line's versions, seconds and RSS; the access log's method, path, status, ms), so a
log pipeline needs no regular expressions.
"""

from __future__ import annotations

import json
import logging
import time

ACCESS = "xtag.access"  # the access log's logger (XTAG_ACCESS_LOG): one line per request, from observability.py
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "color_message"}
TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: the standard fields plus the record's `extra` ones."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update({k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


class UvicornName(logging.Filter):
    """uvicorn logs its server lines (started, shutting down) under `uvicorn.error` whatever their level: they are
    shown as `uvicorn`, so that an INFO line does not read as an error to someone scanning the log for one."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "uvicorn.error":
            record.name = "uvicorn"
        return True


def log_config(log_format: str, level: str) -> dict:
    """A logging.config.dictConfig for uvicorn's `log_config`: xtag.* and uvicorn.* to stderr in `log_format`.

    uvicorn's own access log stays off (server.py): xtag.access replaces it, with the latency and the
    endpoint it lacked."""
    formatter = {"()": JsonFormatter} if log_format == "json" else {"format": TEXT_FORMAT}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"xtag": formatter},
        "filters": {"uvicorn_name": {"()": UvicornName}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "xtag",
                "filters": ["uvicorn_name"],
                "stream": "ext://sys.stderr",
            }
        },
        "loggers": {
            "xtag": {"handlers": ["stderr"], "level": level.upper(), "propagate": True},
            "uvicorn": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
            "uvicorn.error": {"level": level.upper()},
            "uvicorn.access": {"handlers": [], "propagate": False},
        },
    }
