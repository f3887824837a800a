"""Missing-label weighting (thesis ch. 3): per-label positive weights every family reads; numpy only."""
