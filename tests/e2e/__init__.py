"""End-to-end checks: crash-safe training, the package layout, the import rules."""
