"""HTTP prediction service over an xtag bundle (FastAPI)."""
