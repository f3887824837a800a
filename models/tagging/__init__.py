"""A whole corpus through a loaded bundle: predictions in batches, and `xtag predict`'s output rows."""
