"""From features to labels: the Predictor, beam search, calibration, macro-aware reweighting and macro-optimal
inference, the stop flag long work checks, and batched prediction over a corpus."""
