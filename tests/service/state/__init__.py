"""Tests of xtag.service.state: model reloads and the feedback store."""
