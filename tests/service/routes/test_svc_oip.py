"""The Open Inference Protocol (KServe v2 REST, service/routes/oip.py) against a running server, spoken by a real
client from PyPI (tritonclient[http]) as it speaks to Triton: the same top k as /v1/predict for every text, in
binary and in JSON, and the protocol's 400 {"error"} for a wrong datatype, shape or parameter."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest
from xtag.config.settings import Settings

from tests.service.svc_support import LiveServer, bundles, client, make_client  # noqa: F401  (pytest fixtures)

httpclient = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402

TEXTS = [
    "python interpreter script module",
    "game player arcade level puzzle",
    "database sql query postgres and a network socket server",
    "quasar nebula telescope image photo",
    "ünïcode text ✓ with an editor vim syntax",
]


@pytest.fixture(scope="module")
def server(bundles):
    with LiveServer(Settings(_env_file=None, bundle=bundles["a"])) as live:
        yield live


@pytest.fixture
def triton(server):
    c = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
    yield c
    c.close()


def text_input(texts: list[str], binary: bool = True, shape: tuple | None = None):
    array = np.array([t.encode() for t in texts], dtype=np.object_).reshape(shape or (len(texts),))
    tensor = httpclient.InferInput("text", list(array.shape), "BYTES")
    tensor.set_data_from_numpy(array, binary_data=binary)
    return tensor


def v1_top_k(server, texts: list[str], **options) -> list[list[tuple[str, np.float32]]]:
    body = {"documents": [{"text": t} for t in texts], **options}
    results = httpx.post(server.url + "/v1/predict/batch", json=body, timeout=30).json()["results"]
    return [[(x["name"], np.float32(x["score"])) for x in r["labels"]] for r in results]


def oip_top_k(result) -> list[list[tuple[str, np.float32]]]:
    labels, scores = result.as_numpy("labels"), result.as_numpy("scores")
    assert labels.shape == scores.shape and scores.dtype == np.float32
    text = [[n.decode() if isinstance(n, bytes) else n for n in row] for row in labels]  # JSON data comes as str
    return [[(n, s) for n, s in zip(row_n, row_s) if n] for row_n, row_s in zip(text, scores)]


def test_health_and_metadata_as_tritonclient_reads_them(triton):
    assert triton.is_server_live() and triton.is_server_ready()
    assert triton.is_model_ready("tiny-a") and not triton.is_model_ready("nope")
    server = triton.get_server_metadata()
    assert server["name"] == "xtag" and "binary_tensor_data" in server["extensions"]
    meta = triton.get_model_metadata("tiny-a")
    version = meta["versions"][0]
    assert meta["name"] == "tiny-a" and meta["platform"] == "xtag_xlinear"
    assert meta["inputs"] == [{"name": "text", "datatype": "BYTES", "shape": [-1]}]
    assert meta["outputs"] == [
        {"name": "labels", "datatype": "BYTES", "shape": [-1, -1]},
        {"name": "scores", "datatype": "FP32", "shape": [-1, -1]},
    ]
    assert triton.get_model_metadata("tiny-a", version)["versions"] == [version]
    assert triton.is_model_ready("tiny-a", version) and not triton.is_model_ready("tiny-a", "no-such-version")


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_infer_gives_the_same_top_k_as_v1_predict(server, triton, binary):
    outputs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("labels", "scores")]
    result = triton.infer("tiny-a", [text_input(TEXTS, binary)], outputs=outputs, request_id="r-7")
    assert oip_top_k(result) == v1_top_k(server, TEXTS)
    assert result.get_response()["id"] == "r-7" and result.get_response()["model_name"] == "tiny-a"
    # tritonclient's defaults (binary inputs, every output binary), options as parameters, a version pinned, [n, 1]
    version = triton.get_model_metadata("tiny-a")["versions"][0]
    options = {"k": 3, "reweight_scheme": "power", "reweight_alpha": 0.5, "reweight_beta": 1.0, "beam_size": 20}
    result = triton.infer("tiny-a", [text_input(TEXTS, shape=(len(TEXTS), 1))], version, parameters=options)
    assert result.get_response()["model_version"] == version
    v1 = v1_top_k(server, TEXTS, k=3, beam_size=20, reweight={"scheme": "power", "alpha": 0.5, "beta": 1.0})
    assert oip_top_k(result) == v1 and all(len(row) == 3 for row in v1)


def test_one_output_when_asked_for_one_and_the_threshold_pads_with_empty_labels(server, triton):
    result = triton.infer(
        "tiny-a", [text_input(TEXTS)], outputs=[httpclient.InferRequestedOutput("scores")], parameters={"k": 4}
    )
    assert [o["name"] for o in result.get_response()["outputs"]] == ["scores"] and result.as_numpy("labels") is None
    result = triton.infer("tiny-a", [text_input(TEXTS)], parameters={"k": 4, "threshold": 0.3})
    assert oip_top_k(result) == v1_top_k(server, TEXTS, k=4, threshold=0.3)
    labels, scores = result.as_numpy("labels"), result.as_numpy("scores")
    assert labels.shape == (len(TEXTS), 4) and np.all((labels == b"") == (scores == 0)) and (labels == b"").any()


def refused(call) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as info:
        call()
    return info.value


@pytest.mark.parametrize(
    "make, parameters, why",
    [
        (lambda: httpclient.InferInput("text", [1], "FP32"), None, "datatype must be BYTES"),
        (lambda: text_input(TEXTS[:4], shape=(2, 2)), None, "shape must be [n] or [n, 1]"),
        (lambda: text_input(TEXTS), {"k": 0}, "parameters.k"),
        (lambda: text_input(TEXTS), {"reweight_scheme": "nope", "reweight_alpha": 1}, "parameters.reweight_scheme"),
        (lambda: text_input(TEXTS), {"beams": 3}, "unknown parameters ['beams']"),
        (lambda: text_input(TEXTS), {"k": 10_000}, "k"),
        (lambda: text_input(["   "]), None, "text[0]: text is empty"),
    ],
    ids=["datatype", "shape", "k", "reweight", "unknown", "k-over-labels", "blank"],
)
def test_a_wrong_datatype_shape_or_parameter_is_a_400_protocol_error(triton, make, parameters, why):
    tensor = make()
    if tensor.datatype() == "FP32":
        tensor.set_data_from_numpy(np.zeros(1, dtype=np.float32))
    error = refused(lambda: triton.infer("tiny-a", [tensor], parameters=parameters))
    assert error.status() == "400" and why in error.message(), error.message()


def test_errors_are_the_protocols_error_object(server):
    url = server.url + "/v2/models/tiny-a"
    good = {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["python"]}]}
    cases = [
        (url + "/infer", b"{not json", 400),
        (url + "/infer", json.dumps({**good, "inputs": [{**good["inputs"][0], "shape": [2]}]}), 400),
        (url + "/infer", json.dumps({**good, "outputs": [{"name": "probabilities"}]}), 400),
        (url + "/infer", json.dumps({**good, "extra": 1}), 400),
        (server.url + "/v2/models/nope/infer", json.dumps(good), 404),
        (url + "/versions/0.0.0-nope/infer", json.dumps(good), 404),
    ]
    for target, body, status in cases:
        r = httpx.post(target, content=body, timeout=30)
        assert r.status_code == status and r.headers["content-type"] == "application/json", (target, body, r.text)
        assert list(r.json()) == ["error"] and r.json()["error"], r.text
    r = httpx.get(server.url + "/v2/models/nope", timeout=30)
    assert r.status_code == 404 and "nope" in r.json()["error"]
    ok = httpx.post(url + "/infer", json=good, timeout=30).json()  # plain JSON: no binary unless asked for
    assert [o["name"] for o in ok["outputs"]] == ["labels", "scores"] and ok["outputs"][0]["shape"][0] == 1


def test_the_api_key_guards_infer_and_metadata_but_not_the_probes(make_client):
    c = make_client(api_key="s3cret")
    body = {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["python"]}]}
    r = c.post("/v2/models/tiny-a/infer", json=body)
    assert r.status_code == 401 and list(r.json()) == ["error"]
    assert c.get("/v2/models/tiny-a").status_code == 401
    assert c.post("/v2/models/tiny-a/infer", json=body, headers={"X-API-Key": "s3cret"}).status_code == 200
    for probe in ("/v2/health/live", "/v2/health/ready", "/v2/models/tiny-a/ready"):
        assert c.get(probe).status_code == 200, probe


def test_infer_counts_in_the_models_metrics(client):
    body = {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["python"]}]}
    assert client.post("/v2/models/tiny-a/infer", json=body).status_code == 200
    metrics = client.get("/metrics").text
    assert any(
        line.startswith("xtag_http_requests_total") and "/v2/models/{name}/infer" in line and 'model="tiny-a"' in line
        for line in metrics.splitlines()
    ), [line for line in metrics.splitlines() if "v2" in line]


def test_versions_as_the_protocol_names_them(make_client, tmp_path, bundles):
    """A model of versions (ROOT/NAME/VERSION, Triton's layout): metadata lists them, /versions/{v} pins one (the
    same top k as /v1's pinned route), the unpinned infer goes where the traffic sends it, each answer names its
    version, and a version that failed to load is not ready."""
    import shutil

    from tests.service.rollout.test_svc_versions import settled

    for version, key in (("0", "broken"), ("1", "a"), ("2", "b")):
        shutil.copytree(bundles[key], tmp_path / "tags" / version)
    c = settled(make_client(bundle=None, bundle_root=tmp_path, all_bundles=True, wait=False))
    assert c.get("/v2/models/tags").json()["versions"] == ["0", "1", "2"]
    assert c.get("/v2/models/tags/versions/1").json()["versions"] == ["0", "1", "2"]
    body = {"inputs": [{"name": "text", "shape": [len(TEXTS)], "datatype": "BYTES", "data": TEXTS}]}
    for version in ("1", "2"):
        r = c.post(f"/v2/models/tags/versions/{version}/infer", json={**body, "parameters": {"k": 3}})
        assert r.json()["model_version"] == version == r.headers["X-Model-Version"]
        labels = r.json()["outputs"][0]["data"]
        v1 = c.post(
            f"/v1/models/tags/versions/{version}/predict/batch",
            json={"documents": [{"text": t} for t in TEXTS], "k": 3},
        ).json()["results"]
        assert labels == [x["name"] for row in v1 for x in row["labels"]]
    assert c.post("/v2/models/tags/infer", json=body).json()["model_version"] == "2"  # the stable one's traffic
    assert c.get("/v2/models/tags/versions/2/ready").json() == {"name": "tags", "ready": True}
    assert c.get("/v2/models/tags/versions/0/ready").status_code == 503
    for path in ("/v2/models/tags/versions/9/ready", "/v2/models/tags/versions/9/infer"):
        r = c.post(path, json=body) if path.endswith("infer") else c.get(path)
        assert r.status_code == 404 and "9" in r.json()["error"], path
