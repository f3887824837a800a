"""Tests of xtag.service.rollout: versions' traffic and the automatic rollout policy."""
