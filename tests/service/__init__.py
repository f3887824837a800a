"""Tests of xtag.service over HTTP (TestClient and live uvicorn servers)."""
