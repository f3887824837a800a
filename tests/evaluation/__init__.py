"""Tests of xtag.evaluation: reports, conventions and calibration."""
