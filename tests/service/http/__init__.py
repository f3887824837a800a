"""Tests of xtag.service.http: bodies, heads, admission, cost, hang-ups, problems, headers, OpenAPI and docs."""
