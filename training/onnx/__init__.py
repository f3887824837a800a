"""ONNX: graph export, the one parity gate, onnxruntime's optimiser and precisions."""
