"""Texts to what a model scores: the TF-IDF featuriser, the static and ONNX encoders, and the device they run on."""
