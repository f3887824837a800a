"""The bundle format: the manifest and its checksums, the components a predictor is built from, files written
atomically, and the checks every bundle passes at load (index bounds, finite values)."""
