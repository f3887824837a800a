"""Tests of the dashboard (service/dashboard/) in headless Chromium."""
