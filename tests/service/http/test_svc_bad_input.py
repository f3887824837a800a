"""Bad input gets a 4xx problem+json that says what is wrong, never a 500 (issue 3, 'Behaviour under bad input')."""

from __future__ import annotations

import json
import socket
import time

import pytest

from tests.service.svc_support import ADMIN, ADMIN_KEY, bundles, client, make_client  # noqa: F401  (pytest fixtures)

OK = {"text": "python script", "k": 2}


def assert_problem(r, status: int, *words: str) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert {"type", "title", "status", "detail"} <= set(body) and body["status"] == status
    for w in words:
        assert w in body["detail"], body["detail"]
    return body


@pytest.mark.parametrize(
    "body, words",
    [
        ({"text": ""}, ["text", "empty"]),
        ({"text": "   \n\t "}, ["text", "whitespace"]),
        ({"text": 5}, ["text", "string"]),
        ({"text": None}, ["text", "string"]),
        ({"text": ["a", "b"]}, ["text", "string"]),
        ({}, ["text", "required"]),
        ({"text": "a", "k": 0}, ["k", "greater than or equal to 1"]),
        ({"text": "a", "k": -3}, ["k"]),
        ({"text": "a", "k": 10}, ["k", "above the maximum of 9"]),
        ({"text": "a", "k": "5"}, ["k", "integer"]),
        ({"text": "a", "k": 2.5}, ["k", "integer"]),
        ({"text": "a", "k": True}, ["k", "integer"]),
        ({"text": "a", "beam_size": 0}, ["beam_size"]),
        ({"text": "a", "beam_size": 100000}, ["beam_size", "XTAG_MAX_BEAM_SIZE"]),
        ({"text": "a", "threshold": 1.5}, ["threshold"]),
        ({"text": "a", "threshold": "high"}, ["threshold"]),
        ({"text": "a", "colour": "red"}, ["colour", "Extra inputs"]),
        ({"text": "a", "reweight": {"scheme": "psp", "alpha": 0.5, "gamma": 1}}, ["reweight.gamma", "Extra inputs"]),
        ({"text": "a", "reweight": {"scheme": "inverse", "alpha": 0.5}}, ["reweight.scheme"]),
        ({"text": "a", "reweight": {"scheme": "psp", "alpha": 1.5}}, ["reweight.alpha"]),
        ({"text": "a", "reweight": {"scheme": "psp", "alpha": -0.1}}, ["reweight.alpha"]),
        ({"text": "a", "reweight": {"scheme": "psp"}}, ["reweight.alpha", "required"]),
        ({"text": "a", "reweight": {"scheme": "psp", "alpha": "half"}}, ["reweight.alpha"]),
        ({"text": "a", "reweight": {"scheme": "psp", "alpha": 0.5, "beta": 1}}, ["beta", "power"]),
        ({"text": "a", "reweight": {"scheme": "psp", "alpha": 0, "beta": 1}}, ["beta", "power", "'psp'"]),  # 47 9h
        ({"text": "a", "reweight": {"scheme": "power", "alpha": 0.5, "beta": -1}}, ["reweight.beta"]),
        ({"text": "a", "reweight": "psp"}, ["reweight"]),
    ],
)
def test_invalid_predict_fields_are_422(client, body, words):
    assert_problem(client.post("/v1/predict", json=body), 422, *words)


@pytest.mark.parametrize(
    "body, words",
    [
        ({"documents": []}, ["documents", "at least 1"]),
        ({"documents": "python"}, ["documents"]),
        ({"documents": [{"text": "ok"}, {"text": " "}]}, ["documents[1].text", "empty"]),
        ({"documents": [{"text": "ok", "lang": "en"}]}, ["documents[0].lang", "Extra inputs"]),
        ({"documents": [{"id": 1.5, "text": "ok"}]}, ["documents[0].id"]),
        ({"documents": [{"text": "ok"}], "k": 0}, ["k"]),
        ({"documents": [{"text": "ok"}] * 9}, ["documents", "maximum per batch is 8"]),
    ],
)
def test_invalid_batches_are_422(make_client, body, words):
    c = make_client(max_batch_documents=8)
    assert_problem(c.post("/v1/predict/batch", json=body), 422, *words)


def test_over_long_text_is_413(make_client):
    c = make_client(max_text_chars=50)
    assert c.post("/v1/predict", json={"text": "python " * 7}).status_code == 200
    assert_problem(c.post("/v1/predict", json={"text": "python " * 8}), 413, "56 characters", "limit is 50")
    docs = [{"text": "ok"}, {"text": "x" * 51}]
    assert_problem(c.post("/v1/predict/batch", json={"documents": docs}), 413, "documents[1].text")


def test_body_over_the_limit_is_413(make_client):
    c = make_client(max_body_bytes=2048)
    big = json.dumps({"text": "python " * 400}).encode()
    assert_problem(
        c.post("/v1/predict", content=big, headers={"content-type": "application/json"}),
        413,
        "over the limit of 2048 bytes",
    )

    def chunks():  # no Content-Length: the limit is enforced while reading
        yield b'{"text": "'
        for _ in range(50):
            yield b"python " * 20
        yield b'"}'

    assert_problem(
        c.post("/v1/predict", content=chunks(), headers={"content-type": "application/json"}), 413, "over the limit"
    )


def test_body_over_the_limit_is_rejected_before_it_is_read(bundles):
    """A live server answers 413 on the headers alone, while the client has sent none of the body."""
    from xtag.config.settings import Settings

    from tests.service.svc_support import LiveServer

    with LiveServer(Settings(_env_file=None, bundle=bundles["a"], max_body_bytes=4096)) as server:
        with socket.create_connection(("127.0.0.1", server.settings.server.port), timeout=5) as s:
            s.sendall(
                b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 500000000\r\n\r\n"
            )
            start, data = time.time(), b""
            while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            assert time.time() - start < 5
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 413")
        assert b"application/problem+json" in head
        assert json.loads(body)["status"] == 413


def test_invalid_utf8_is_400(client):
    r = client.post("/v1/predict", content=b'{"text": "caf\xe9 \xff"}', headers={"content-type": "application/json"})
    assert_problem(r, 400, "UTF-8")


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_wrong_content_type_is_415(client, content_type):
    headers = {"content-type": content_type} if content_type else {}
    r = client.post("/v1/predict", content=json.dumps(OK).encode(), headers=headers)
    assert_problem(r, 415, "application/json")


def test_json_with_charset_and_vendor_types_is_accepted(client):
    for ct in ("application/json; charset=utf-8", "application/vnd.xtag+json"):
        assert client.post("/v1/predict", content=json.dumps(OK), headers={"content-type": ct}).status_code == 200


@pytest.mark.parametrize(
    "raw, status, word",
    [
        (b'{"text": "abc"', 400, "JSON"),
        (b"", 400, "JSON"),
        (b"NaN", 400, "JSON"),
        (b'["python script"]', 422, "dictionary"),
        (b'"python script"', 422, "dictionary"),
    ],
)
def test_malformed_json(client, raw, status, word):
    r = client.post("/v1/predict", content=raw, headers={"content-type": "application/json"})
    assert_problem(r, status, word)


def test_unknown_routes_methods_and_query_params(client):
    assert_problem(client.get("/v2/predict"), 404, "/v2/predict")
    assert_problem(client.get("/v1/predict"), 405, "GET")
    assert_problem(client.get("/v1/labels", params={"limit": "many"}), 422, "query.limit")
    assert_problem(client.get("/v1/labels", params={"offset": -1}), 422, "query.offset")


def test_admin_reload_with_bad_body(make_client):
    client = make_client(admin_key=ADMIN_KEY)
    client.headers.update(ADMIN)
    assert_problem(client.post("/v1/admin/reload", json={"bundel": "/x"}), 422, "bundel")
    assert_problem(client.post("/v1/admin/reload", json={"bundle": 5}), 422, "bundle")


def test_annif_bad_input(client):
    assert_problem(client.post("/v1/projects/tiny-a/suggest", data={"limit": "3"}), 400, "text")
    assert_problem(client.post("/v1/projects/tiny-a/suggest", data={"text": "a", "limit": "lots"}), 400, "limit")
    assert_problem(client.post("/v1/projects/tiny-a/suggest", data={"text": "a", "threshold": "2"}), 400, "threshold")
    assert_problem(client.post("/v1/projects/tiny-a/suggest", json={"text": "a"}), 415, "form")
    form = {"content-type": "application/x-www-form-urlencoded"}
    for raw in (b"text=caf%E9+db", b"text=caf\xe9 db"):  # Latin-1 é, percent-encoded and raw: not UTF-8
        assert_problem(client.post("/v1/projects/tiny-a/suggest", content=raw, headers=form), 400, "UTF-8")
    ok = client.post("/v1/projects/tiny-a/suggest", content=b"text=caf%C3%A9+sql+database&limit=2", headers=form)
    assert ok.status_code == 200 and len(ok.json()["results"]) == 2
    assert_problem(client.post("/v1/projects/nope/suggest", data={"text": "a"}), 404, "nope")
    assert_problem(client.get("/v1/projects/nope"), 404, "nope")
    assert_problem(client.post("/v1/projects/tiny-a/suggest-batch", json={"documents": [{"txt": "a"}]}), 422, "txt")


def test_annif_multipart_form_with_invalid_utf8_is_400(client):
    boundary = "xtagboundary"

    def multipart(text: bytes) -> tuple[bytes, dict]:
        body = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="text"\r\n\r\n'.encode()
            + text
            + f'\r\n--{boundary}\r\nContent-Disposition: form-data; name="limit"\r\n\r\n2\r\n--{boundary}--\r\n'.encode()
        )
        return body, {"content-type": f"multipart/form-data; boundary={boundary}"}

    body, headers = multipart(b"caf\xe9 sql database")  # Latin-1 \xe9: not UTF-8
    assert_problem(client.post("/v1/projects/tiny-a/suggest", content=body, headers=headers), 400, "UTF-8")
    body, headers = multipart("café sql database".encode())
    ok = client.post("/v1/projects/tiny-a/suggest", content=body, headers=headers)
    assert ok.status_code == 200 and len(ok.json()["results"]) == 2
    ok = client.post("/v1/projects/tiny-a/suggest", files={"text": (None, "sql database")}, data={"limit": "1"})
    assert ok.status_code == 200 and len(ok.json()["results"]) == 1
    bad = client.post("/v1/projects/tiny-a/suggest", content=b"junk", headers={"content-type": "multipart/form-data"})
    assert_problem(bad, 400, "multipart")
