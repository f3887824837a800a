"""Tests of xtag.service.observability: metrics, logs, drift and the timeline."""
