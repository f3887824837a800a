"""Tests of training/onnx/."""
