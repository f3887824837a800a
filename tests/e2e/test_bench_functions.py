"""bench/ reads as named steps: no function over 100 lines in any benchmark script (issue 39), and its README maps every script (issue 48)."""

from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
LIMIT = 100


def long_functions(folder: Path, limit: int = LIMIT) -> list[str]:
    """'path:line name (N lines)' for each function over `limit` lines in folder's .py files, its git-ignored
    outputs and venvs (out/, .venv-pecos/) left out."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        if any(part == "out" or part.startswith(".") for part in path.relative_to(folder).parts):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found.append(f"{path.relative_to(folder)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_bench_function_is_over_100_lines():
    assert long_functions(BENCH) == [], "split these into named steps"


def test_the_check_finds_a_long_function_in_a_subfolder(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT))
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "long.py").write_text(f"async def main():\n{body}\n")
    (tmp_path / "short.py").write_text(f"def main():\n{body[: body.rindex(chr(10))]}\n")
    assert long_functions(tmp_path) == ["experiments/long.py:1 main (101 lines)"]


def unlisted_scripts(folder: Path) -> list[str]:
    """Scripts under `folder` (helpers, table builders and package files aside) that its README.md does not name."""
    readme = (folder / "README.md").read_text()
    skip = {"helpers", "result_tables", "out"}
    return [
        str(path.relative_to(folder))
        for path in sorted(folder.rglob("*.py"))
        if path.name != "__init__.py"
        and not skip & set(path.relative_to(folder).parts)
        and not any(part.startswith(".") for part in path.relative_to(folder).parts)
        and f"`{path.relative_to(folder)}`" not in readme
    ]


def test_the_bench_readme_names_every_script():
    """bench/README.md maps each script to its RESULTS.md sections: a new script goes into its table."""
    assert unlisted_scripts(BENCH) == []


def test_the_readme_check_finds_a_missing_script(tmp_path):
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "new.py").write_text("")
    (tmp_path / "listed.py").write_text("")
    (tmp_path / "README.md").write_text("| `listed.py` | ... |\n")
    assert unlisted_scripts(tmp_path) == ["experiments/new.py"]
