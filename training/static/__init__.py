"""The static token-embedding block of XR-Linear's Φ_cat: distil a teacher's token table, fit it, build it."""
