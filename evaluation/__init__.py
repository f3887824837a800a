"""Torch-free evaluation of a bundle on a corpus: metrics, reports and score calibration."""
