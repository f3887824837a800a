"""The Open Inference Protocol's wire format (KServe v2 REST, routes/oip.py): the infer request in, with Triton's
binary tensor extension, and the two output tensors out.

The model takes one input, `text` (BYTES, shape [n] or [n, 1]), and answers `labels` (BYTES: label ids as the API
names them) then `scores` (FP32), both [n, k]. k and the other /v1/predict options are request `parameters`; the
reweighting object is spelled flat (`reweight_scheme`, `reweight_alpha`, `reweight_beta`), since a parameter's value
is a string, number or boolean. tritonclient sends its inputs as binary data and asks for binary outputs by default,
so both are read and written: an input's `binary_data_size` bytes follow the JSON header, whose length the
`Inference-Header-Content-Length` header gives; a BYTES element there is a 4-byte little-endian length and its bytes.
"""

from __future__ import annotations

import struct
from typing import Annotated, Any

import numpy as np
import orjson
from pydantic import BaseModel, Field, StrictBool, StrictInt, StrictStr, ValidationError
from xtag.models.inference.types import Predictions
from xtag.service.http.problems import Problem, validation_problem
from xtag.service.http.response_json import kept_mask
from xtag.service.schemas import Number, PredictOptions, Strict, not_blank

HEADER_LENGTH = "inference-header-content-length"
TEXT, LABELS, SCORES = "text", "labels", "scores"
OPTIONS = ("k", "beam_size", "threshold", "rerank")  # PredictOptions' fields, as parameters of the same names
REWEIGHT = "reweight_"  # reweight_scheme, reweight_alpha, reweight_beta: the Reweight object, flat
REWEIGHT_PARAMETERS = tuple(REWEIGHT + f for f in ("scheme", "alpha", "beta"))
BINARY_OUTPUT = "binary_data_output"  # the extension's request parameter: every output in binary
BINARY = "binary_data"  # the extension's output parameter
BINARY_SIZE = "binary_data_size"  # the extension's input and output parameter
EXTENSIONS = ["binary_tensor_data", "parameters"]  # the extensions GET /v2 lists (Triton's names)

# A parameter's value: a string, a number or a boolean ($parameter); strict, so that true stays a boolean
Parameters = dict[str, StrictBool | StrictInt | Number | StrictStr]


class TensorMetadata(BaseModel):
    name: str
    datatype: str
    shape: list[int] = Field(description="-1: any size")


class ModelMetadata(BaseModel):
    name: str
    versions: list[str]
    platform: str
    inputs: list[TensorMetadata]
    outputs: list[TensorMetadata]


class ServerMetadata(BaseModel):
    name: str
    version: str
    extensions: list[str]


class ServerLive(BaseModel):
    live: bool


class ServerReady(BaseModel):
    ready: bool


class ModelReady(BaseModel):
    name: str
    ready: bool


INPUTS = [TensorMetadata(name=TEXT, datatype="BYTES", shape=[-1])]
OUTPUTS = [
    TensorMetadata(name=LABELS, datatype="BYTES", shape=[-1, -1]),
    TensorMetadata(name=SCORES, datatype="FP32", shape=[-1, -1]),
]


class RequestInput(Strict):
    name: StrictStr
    shape: list[Annotated[StrictInt, Field(ge=0)]]
    datatype: StrictStr
    parameters: Parameters | None = None
    data: list[Any] | None = Field(None, description="row-major, flat or nested; absent when sent as binary data")


class RequestOutput(Strict):
    name: StrictStr
    parameters: Parameters | None = None


class InferRequest(Strict):
    """The protocol's inference request (only its JSON part: binary tensors follow it in the body)."""

    id: StrictStr | None = None
    parameters: Parameters | None = Field(
        None,
        description="k, beam_size, threshold, rerank and reweight_scheme / reweight_alpha / reweight_beta, as "
        "/v1/predict takes them; binary_data_output: every output as binary data",
    )
    inputs: list[RequestInput] = Field(min_length=1, description='one input: "text", BYTES, shape [n] or [n, 1]')
    outputs: list[RequestOutput] | None = Field(None, description='"labels" and/or "scores" (default: both)')


class ResponseOutput(BaseModel):
    name: str
    shape: list[int]
    datatype: str
    parameters: dict[str, Any] | None = None
    data: list[Any] | None = None


class InferResponse(BaseModel):
    model_name: str
    model_version: str
    id: str | None = None
    outputs: list[ResponseOutput]


def bad(detail: str) -> Problem:
    return Problem(400, "bad-request", detail)


def read_request(body: bytes, header_length: str | None) -> tuple[InferRequest, list[str]]:
    """The request and its texts; 400 (the protocol's error object) for anything the model cannot take."""
    head, tail = body, b""
    if header_length is not None:
        try:
            n = int(header_length)
        except ValueError:
            raise bad(f"Inference-Header-Content-Length: not a number: {header_length!r}") from None
        if not 0 <= n <= len(body):
            raise bad(f"Inference-Header-Content-Length: {n}, but the body has {len(body)} bytes")
        head, tail = body[:n], body[n:]
    try:
        data = orjson.loads(head)
    except orjson.JSONDecodeError as exc:
        raise bad(f"the inference request is not valid JSON ({exc})") from None
    try:
        request = InferRequest.model_validate(data)
    except ValidationError as exc:
        raise bad(validation_problem(exc.errors(include_url=False, include_input=False)).detail) from None
    return request, texts_of(request, tail)


def texts_of(request: InferRequest, tail: bytes) -> list[str]:
    names = [i.name for i in request.inputs]
    if names != [TEXT]:
        raise bad(f'the model takes one input, "text" (BYTES, shape [n] or [n, 1]); got {names}')
    [tensor] = request.inputs
    if tensor.datatype != "BYTES":
        raise bad(f'input "text": datatype must be BYTES, got {tensor.datatype}')
    shape = tensor.shape
    if not (len(shape) == 1 or (len(shape) == 2 and shape[1] == 1)) or shape[0] == 0:
        raise bad(f'input "text": shape must be [n] or [n, 1] with n ≥ 1, got {shape}')
    parameters = dict(tensor.parameters or {})
    size = parameters.pop(BINARY_SIZE, None)
    if parameters:
        raise bad(f'input "text": unknown parameters {sorted(parameters)} (only {BINARY_SIZE})')
    if size is None:
        if tail:
            raise bad(f"{len(tail)} bytes follow the JSON header, but no input gives a {BINARY_SIZE}")
        if tensor.data is None:
            raise bad('input "text" has no data')
        elements = flat(tensor.data)
    else:
        if tensor.data is not None:
            raise bad(f'input "text" has both data and a {BINARY_SIZE}')
        if isinstance(size, bool) or not isinstance(size, int) or size != len(tail):
            raise bad(f'input "text": {BINARY_SIZE} is {size!r}, but {len(tail)} bytes follow the JSON header')
        elements = split_bytes(tail)
    if len(elements) != shape[0]:
        raise bad(f'input "text": shape {shape} holds {shape[0]} elements, its data has {len(elements)}')
    texts = []
    for i, element in enumerate(elements):
        try:
            text = element.decode("utf-8") if isinstance(element, bytes) else element
        except UnicodeDecodeError as exc:
            raise bad(f"text[{i}] is not valid UTF-8 (byte {exc.start}: {exc.reason})") from None
        if not isinstance(text, str):
            raise bad(f"text[{i}]: a BYTES element in JSON is a string, got {type(text).__name__}")
        try:
            texts.append(not_blank(text))
        except ValueError as exc:
            raise bad(f"text[{i}]: {exc}") from None
    return texts


def flat(data: list) -> list:
    """Tensor data, row-major, whether sent flat or nested (iteratively: nesting is as deep as the JSON)."""
    out, stack = [], [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            out.append(item)
        else:
            stack.pop()
    return out


def split_bytes(raw: bytes) -> list[bytes]:
    """A binary BYTES tensor's elements: each a 4-byte little-endian length, then that many bytes."""
    out, at = [], 0
    while at < len(raw):
        if at + 4 > len(raw):
            raise bad(f'input "text": binary data ends inside an element\'s length, at byte {at}')
        (n,) = struct.unpack_from("<I", raw, at)
        if at + 4 + n > len(raw):
            raise bad(f'input "text": a binary element of {n} bytes at byte {at} runs past the data')
        out.append(raw[at + 4 : at + 4 + n])
        at += 4 + n
    return out


def options_of(request: InferRequest) -> PredictOptions:
    """The request's parameters as /v1/predict's options (400 naming a wrong one)."""
    parameters = dict(request.parameters or {})
    known = {*OPTIONS, *REWEIGHT_PARAMETERS, BINARY_OUTPUT}
    unknown = sorted(set(parameters) - known)
    if unknown:
        raise bad(f"unknown parameters {unknown}; the parameters are {', '.join(sorted(known))}")
    fields: dict[str, object] = {k: parameters[k] for k in OPTIONS if k in parameters}
    reweight = {k.removeprefix(REWEIGHT): parameters[k] for k in REWEIGHT_PARAMETERS if k in parameters}
    if reweight:
        fields["reweight"] = reweight
    try:
        options = PredictOptions.model_validate(fields)
    except ValidationError as exc:
        detail = validation_problem(exc.errors(include_url=False, include_input=False), ("parameters",)).detail
        raise bad(detail.replace("parameters.reweight.", f"parameters.{REWEIGHT}")) from None
    if not isinstance(parameters.get(BINARY_OUTPUT, False), bool):
        raise bad(f"parameters.{BINARY_OUTPUT}: must be a boolean")
    return options


def outputs_of(request: InferRequest) -> list[tuple[str, bool]]:
    """The outputs to answer, in order, each with whether it goes as binary data."""
    if request.outputs is None:
        binary = bool((request.parameters or {}).get(BINARY_OUTPUT, False))
        return [(LABELS, binary), (SCORES, binary)]
    wanted = []
    for i, output in enumerate(request.outputs):
        if output.name not in (LABELS, SCORES) or output.name in dict(wanted):
            raise bad(f'outputs[{i}]: "{output.name}" is not an output or asked twice (the outputs: labels, scores)')
        parameters = dict(output.parameters or {})
        binary = parameters.pop(BINARY, False)
        if parameters or not isinstance(binary, bool):
            raise bad(f"outputs[{i}].parameters: only {BINARY} (a boolean), got {output.parameters}")
        wanted.append((output.name, binary))
    return wanted


def encode(
    names: list[str],
    preds: Predictions,
    threshold: float | None,
    outputs: list[tuple[str, bool]],
    head: dict,
) -> tuple[bytes, dict[str, str]]:
    """The response body and its extra headers: `head` (model_name, model_version, id) with the output tensors,
    [documents, k]; a label under `threshold` (or none, past the model's last) is "" with score 0."""
    keep = kept_mask(preds, threshold)
    labels = [names[j] if kept else "" for j, kept in zip(preds.labels.ravel().tolist(), keep.ravel().tolist())]
    scores = np.where(keep, preds.scores, 0).astype(np.float32)
    shape = list(preds.labels.shape)
    tensors, binaries = [], []
    for name, binary in outputs:
        tensor: dict[str, object] = {"name": name, "datatype": "BYTES" if name == LABELS else "FP32", "shape": shape}
        if binary:
            raw = (
                b"".join(struct.pack("<I", len(b)) + b for b in (s.encode() for s in labels))
                if name == LABELS
                else scores.astype("<f4").tobytes()
            )
            tensor["parameters"] = {BINARY_SIZE: len(raw)}
            binaries.append(raw)
        elif name == LABELS:
            tensor["data"] = labels
        else:  # the float32 scores' digits as /v1/predict gives them (float64 of each, response_json.py)
            tensor["data"] = orjson.Fragment(
                orjson.dumps(scores.ravel().astype(np.float64), option=orjson.OPT_SERIALIZE_NUMPY)
            )
        tensors.append(tensor)
    header = orjson.dumps({**head, "outputs": tensors})
    if not binaries:
        return header, {}
    return header + b"".join(binaries), {"Inference-Header-Content-Length": str(len(header))}
