"""`xtag warm` fills numba's cache, so the processes after it (first train, first serve) load instead of compile."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _warm(cache: Path) -> str:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    done = subprocess.run(
        [sys.executable, "-m", "xtag", "warm", "--serve-only"], env=env, cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_warm_compiles_once_into_the_cache_and_the_next_process_loads(tmp_path):
    first = _warm(tmp_path)
    compiled = int(re.search(r"(\d+) compiled", first).group(1))
    assert compiled > 0 and f"cache: {tmp_path}" in first
    assert any(tmp_path.rglob("*.nbi"))  # numba's index files, one per kernel
    second = _warm(tmp_path)
    assert re.search(r"\b0 compiled, [1-9]\d* loaded from the cache", second), second
