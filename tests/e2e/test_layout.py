"""The package layout users and contributors rely on: one `xtag` import root, imports that run one way.

The import rules are read from the source (AST), so a back-edge fails here before it becomes a cycle, a
torch import on the serving path or a family's internals leaking into shared code.
"""

from __future__ import annotations

import ast
import dataclasses
import fnmatch
import json
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from xtag.models.families import FAMILIES, Family

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_ROOTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["xtag"]["package-roots"]
PACKAGES = {"xtag": "xtag", **{root: f"xtag.{root}" for root in PACKAGE_ROOTS}}
FAMILY_PACKAGES = {f.train.partition(":")[0].rsplit(".", 1)[0]: f for f in FAMILIES.values()}
NUMPY_ONLY = ("xtag.corpus", "xtag.training.data", "xtag.training.tree", "xtag.training.weighting")
# the corpus floor's only imports from the house: the error type, the label vocabulary and the label texts, leaves of models/
CORPUS_MAY_IMPORT = ("xtag.models.errors", "xtag.models.labels", "xtag.models.label_texts")
HEAVY = ("torch", "transformers", "onnx")  # the train extra; onnxruntime is a serving dependency


def module_files(root: Path) -> dict[str, Path]:
    """Every module of the installed layout, by its dotted name under `xtag`."""
    found = {}
    for folder, prefix in PACKAGES.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = list(path.relative_to(root / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([prefix, *parts])] = path
    return found


def imports_of(path: Path, name: str, known: set[str]) -> set[str]:
    """Dotted names a module imports, anywhere in it (lazy imports inside functions count too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known)
    return out


def registry_entries(path: Path) -> dict[str, set[str]]:
    """The modules the registry names, by Family field ("train", "export", ...): its `Family(...)` calls'
    "module:attr" strings, read from the source so that a planted or new entry counts."""
    names = [f.name for f in dataclasses.fields(Family)]
    found: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == Family.__name__:
            given = [*zip(names, node.args), *((k.arg, k.value) for k in node.keywords)]
            for field, value in given:
                if isinstance(value, ast.Constant) and isinstance(value.value, str) and ":" in value.value:
                    found.setdefault(field, set()).add(value.value.partition(":")[0])
    return found


def resolved_fields(path: Path) -> set[str]:
    """The registry fields a module imports through `Family.resolve("field")`."""
    return {
        node.args[0].value
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "resolve"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    }


def import_graph(root: Path) -> dict[str, set[str]]:
    files = module_files(root)
    return {name: imports_of(path, name, set(files)) for name, path in files.items()}


def registry_edges(root: Path) -> dict[str, set[str]]:
    """The imports the registry makes for its users: a module that calls `resolve("train")` imports every
    family's train module when it runs. Shared code reaching a family this way is the design; a loop is not."""
    files = module_files(root)
    entries = registry_entries(files[Family.__module__])
    return {name: set().union(*(entries.get(f, set()) for f in resolved_fields(path))) for name, path in files.items()}


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def violations(graph: dict[str, set[str]], via_registry: dict[str, set[str]] | None = None) -> list[str]:
    """Every broken rule, one line each (empty: the layout holds); `via_registry` (registry_edges) counts
    for cycles only."""
    found = []
    internal = set(graph)
    for module, imported in sorted(graph.items()):
        for target in sorted(imported):
            top = target.split(".")[0]
            if top in PACKAGES and top != "xtag":
                found.append(f"{module} imports {target}: import it as xtag.{target}")
            family = next((f for f in FAMILY_PACKAGES if within(target, f)), None)
            owner = next((f for f in FAMILY_PACKAGES if within(module, f)), None)
            if family and within(module, "xtag.training") and family != owner:
                if owner is None:
                    found.append(f"{module} (shared code) imports the family module {target}")
                elif FAMILY_PACKAGES[family].kind not in FAMILY_PACKAGES[owner].builds_on:
                    found.append(f"{module} imports {target}, a family its registry entry does not build on")
            if within(module, "xtag.models") and (
                within(target, "xtag.corpus")
                or within(target, "xtag.training")
                or within(target, "xtag.evaluation")
                or within(target, "xtag.service")
                or within(target, "xtag.cluster")
            ):
                found.append(f"{module} (torch-free inference) imports {target}")
            if within(module, "xtag.service") and within(target, "xtag.training"):
                found.append(f"{module} (service) imports {target}: serving never imports training")
            if within(module, "xtag.service") and within(target, "xtag.cluster"):
                found.append(f"{module} (service) imports {target}: serving scales as pods, not on Ray")
            if within(module, "xtag.cluster") and (within(target, "xtag.service") or within(target, "xtag.evaluation")):
                found.append(f"{module} (cluster) imports {target}: Ray jobs build on models and training only")
            if within(module, "xtag.config") and any(
                within(target, f"xtag.{above}") for above in ("service", "training", "evaluation", "cluster")
            ):
                found.append(f"{module} (config) imports {target}: settings sit below everything that reads them")
            if within(module, "xtag.training") and within(target, "xtag.evaluation"):
                found.append(f"{module} (training) imports {target}: training never imports evaluation")
            if (within(module, "xtag.evaluation") or within(module, "xtag.cluster")) and within(
                target, "xtag.training"
            ):
                found.append(f"{module} imports {target}: corpus files are read through xtag.corpus, not training")
            if within(module, "xtag.corpus") and within(target, "xtag") and not within(target, "xtag.corpus"):
                if not any(within(target, leaf) for leaf in CORPUS_MAY_IMPORT):
                    found.append(f"{module} (the corpus floor) imports {target}")
            if (within(module, "xtag.models") or within(module, "xtag.evaluation")) and top in HEAVY:
                found.append(f"{module} (serving path) imports {target}")
            if any(within(module, p) for p in NUMPY_ONLY) and top in HEAVY:
                found.append(f"{module} (numpy-only group) imports {target}")
            private = [i for i, part in enumerate(target.split(".")) if part.startswith("_") and part != "__init__"]
            if private and target in internal:
                owner = ".".join(target.split(".")[: private[0]])
                if not within(module, owner):
                    found.append(f"{module} imports the private module {target}")
    via_registry = via_registry or {}
    both = {m: ts | via_registry.get(m, set()) for m, ts in graph.items()}
    found += [f"import cycle: {' -> '.join(c)}" for c in cycles(both)]
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected group of internal modules (a package importing its own modules,
    or a module its package, is not a cycle: __init__ files are left out of the walk)."""
    edges = {
        m: {t for t in ts if t in graph and t != m and not within(m, t) and not within(t, m)} for m, ts in graph.items()
    }
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def models_arrows(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """The arrows between models/ sub-packages, (importer, imported); a loose module at its top counts as one."""

    def unit(name: str) -> str | None:
        parts = name.split(".")
        return parts[2] if len(parts) > 2 and parts[1] == "models" else None

    return {
        (unit(m), unit(t))
        for m, ts in graph.items()
        for t in ts
        if t in graph and unit(m) and unit(t) and unit(m) != unit(t)
    }


def two_way_pairs(arrows: set[tuple[str, str]]) -> list[tuple[str, str]]:
    return sorted({tuple(sorted(a)) for a in arrows if a[::-1] in arrows})


def arrows_up(arrows: set[tuple[str, str]]) -> int:
    """The fewest arrows that point up in any order of the sub-packages as floors (0: they stack), exact: a dynamic
    program over the sets placed on the floors below (2^n sets: a second for models/'s 18)."""
    nodes = sorted({n for a in arrows for n in a})
    out = [sum(1 << nodes.index(b) for a, b in arrows if a == n) for n in nodes]
    best = [0] + [len(arrows) + 1] * ((1 << len(nodes)) - 1)
    for below in range(1 << len(nodes)):
        for v, targets in enumerate(out):
            if not below >> v & 1:
                up = best[below] + (targets & ~below).bit_count()  # v's arrows to the floors above it
                best[below | 1 << v] = min(best[below | 1 << v], up)
    return best[-1]


def test_imports_run_one_way():
    assert violations(import_graph(ROOT), registry_edges(ROOT)) == []


def test_models_sub_packages_stack_as_floors():
    """0 two-way pairs between models/ sub-packages and 0 arrows up: each imports only those on floors below it."""
    arrows = models_arrows(import_graph(ROOT))
    assert two_way_pairs(arrows) == []
    assert arrows_up(arrows) == 0


def test_a_planted_two_way_pair_between_models_sub_packages_is_counted(tmp_path):
    for folder in PACKAGES:
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    planted = tmp_path / "models/inference/predictor.py"
    planted.write_text(planted.read_text() + "\nfrom xtag.models.tagging import tagger\n")
    assert two_way_pairs(models_arrows(import_graph(tmp_path))) == [("inference", "tagging")]


PLANTED_FAMILY = 'Family("loop", None, "m:C", "xtag.training.update_run:update_run", "m:e", (), 0.0, frozenset())'


@pytest.mark.parametrize(
    ("file", "line", "expected"),
    [
        ("training/lightxml/train.py", "from xtag.training.xlinear import nodes", "does not build on"),
        ("training/tree/build.py", "from xtag.training.xlinear import nodes", "(shared code) imports the family"),
        ("models/labels.py", "from xtag.training.data import fingerprint", "(torch-free inference) imports"),
        ("models/inference/predictor.py", "from xtag.corpus.files import Corpus", "(torch-free inference) imports"),
        ("evaluation/report.py", "from xtag.training.data import fingerprint", "read through xtag.corpus"),
        ("cluster/shards.py", "from xtag.training.data import apt_corpus", "read through xtag.corpus"),
        ("corpus/files.py", "from xtag.models.inference import predictor", "(the corpus floor) imports"),
        ("corpus/files.py", "from xtag.training.data import fingerprint", "(the corpus floor) imports"),
        ("training/weighting/label_weights.py", "import torch", "(numpy-only group) imports torch"),
        ("training/deep/optim.py", "from xtag.models.engine import _scratch", "private module"),
        ("training/onnx/parity.py", "from xtag.training.onnx import graph", "import cycle"),
        ("service/app.py", "import service.problems", "import it as xtag.service"),
        ("service/app.py", "from xtag.training import config", "(service) imports xtag.training.config"),
        ("service/app.py", "from xtag.cluster import connect", "(service) imports xtag.cluster.connect"),
        ("models/labels.py", "from xtag.cluster import connect", "(torch-free inference) imports xtag.cluster"),
        ("cluster/connect.py", "from xtag.service import deps", "(cluster) imports xtag.service.deps"),
        ("config/settings.py", "from xtag.service import deps", "(config) imports xtag.service.deps"),
        ("config/model_set.py", "from xtag.cluster import connect", "(config) imports xtag.cluster.connect"),
        ("training/onnx/parity.py", "from xtag.evaluation import report", "(training) imports xtag.evaluation"),
        # loops closed only through the registry's "module:attr" strings (run.py resolves every family's train)
        ("training/xlinear/train.py", "from xtag.training.run import save_model", "import cycle"),
        ("models/families.py", PLANTED_FAMILY, "import cycle: xtag.training.run -> xtag.training.update_run"),
    ],
)
def test_a_planted_back_edge_fails(tmp_path, file, line, expected):
    for folder in PACKAGES:
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "models/engine/_scratch.py").write_text("")  # a private module, for the private-import rule
    planted = tmp_path / file
    planted.write_text(planted.read_text() + f"\n{line}\n")
    assert any(expected in v for v in violations(import_graph(tmp_path), registry_edges(tmp_path)))


ENVIRONMENT = "xtag.config.settings"  # the one module that reads environment variables (and writes them for workers)
READS_ENVIRONMENT = {  # the named exceptions, each with its reason
    "xtag.models.threads": "sizes the libraries' pools from XTAG_THREADS when xtag is imported, before torch, numba "
    "or OpenMP load and before any Settings exist; models/ is the floor below config/, so it cannot ask it",
}
OS_ENVIRONMENT = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}


def environment_reads(path: Path) -> list[int]:
    """The lines of a module that touch the process environment: os.environ, os.getenv and their kin, imported
    from os or reached as attributes."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in OS_ENVIRONMENT:
            if isinstance(node.value, ast.Name) and node.value.id == "os":
                found.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            if any(alias.name in OS_ENVIRONMENT for alias in node.names):
                found.append(node.lineno)
    return found


def environment_violations(root: Path) -> list[str]:
    allowed = {ENVIRONMENT, *READS_ENVIRONMENT}
    return [
        f"{name} reads the environment at line {line}: ask {ENVIRONMENT} (or name it in READS_ENVIRONMENT, and why)"
        for name, path in module_files(root).items()
        if name not in allowed
        for line in environment_reads(path)
    ]


def test_the_environment_is_read_in_one_module():
    assert environment_violations(ROOT) == []


@pytest.mark.parametrize(
    "line",
    [
        'ADDRESS = os.environ.get("RAY_ADDRESS")',
        'RANK = os.getenv("RANK")',
        "from os import environ",
    ],
)
def test_a_planted_environment_read_fails(tmp_path, line):
    for folder in PACKAGES:
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    planted = tmp_path / "cluster/connect.py"
    planted.write_text(planted.read_text() + f"\n{line}\n")
    assert any(v.startswith("xtag.cluster.connect reads the environment") for v in environment_violations(tmp_path))


def test_the_wheel_installs_one_top_level_package(tmp_path):
    """`pip install .` must not put `models`, `training` or `service` beside other distributions' packages."""
    source = tmp_path / "source"  # a copy, so the build leaves no build/ folder in the checkout
    tracked = tracked_files(PACKAGES)  # what a clean clone holds: a file git ignores must not be needed
    for rel in tracked:
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / rel, source / rel)
    for file in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copyfile(ROOT / file, source / file)
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(source),
        ],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = tmp_path.glob("xtag-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {
        "xtag",
        f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info",
    }
    assert "xtag/service/dashboard/index.html" in names  # the dashboard ships with the service
    # every module of a clean clone ships, under its xtag.* name (a package without __init__.py would not)
    modules = {rel for rel in tracked if rel.endswith(".py") and not rel.startswith("xtag/")}
    missing = {rel for rel in modules if f"xtag/{rel}" not in names}
    missing |= {rel for rel in tracked if rel.startswith("xtag/") and rel.endswith(".py") and rel not in names}
    assert not missing, sorted(missing)
    for package in (
        "xtag/cli/",
        "xtag/models/engine/",
        "xtag/training/tree/",
        "xtag/evaluation/",
        "xtag/service/routes/",
    ):
        assert any(n.startswith(package) for n in names), package


def test_old_top_level_names_are_not_importable_outside_the_checkout(tmp_path):
    probe = "import importlib.util as u; print([m for m in ('models', 'training', 'service') if u.find_spec(m)])"
    shown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, check=True)
    assert shown.stdout.strip() == "[]"


EDITABLE_BUILD = """
import json, sys, warnings
from setuptools import build_meta
with warnings.catch_warnings(record=True) as seen:  # what pip's backend runner does, then reprints each one
    warnings.simplefilter("default")
    build_meta.build_editable(sys.argv[1])
print(json.dumps([f"{w.category.__name__}: {str(w.message)[:200]}" for w in seen]))
"""


def test_the_editable_install_raises_no_build_warning(tmp_path):
    """setup.sh's `pip install -e .` opened with a 10-line BuildBackendWarning ("Editable installation ...") that
    looked like an error: the backend, run as pip runs it on a clean copy, raises no warning at all."""
    source = tmp_path / "source"
    for rel in [*tracked_files(PACKAGES), "pyproject.toml", "setup.py", "README.md"]:
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / rel, source / rel)
    (tmp_path / "wheel").mkdir()
    built = subprocess.run(
        [sys.executable, "-c", EDITABLE_BUILD, str(tmp_path / "wheel")], cwd=source, capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr[-2000:]
    assert list((tmp_path / "wheel").glob("xtag-*.whl")), built.stderr[-2000:]
    assert json.loads(built.stdout.strip().splitlines()[-1]) == []


def tracked_files(folders) -> list[str]:
    """The files git tracks under `folders` (every file there, minus caches, outside a git checkout)."""
    listed = subprocess.run(["git", "ls-files", "--", *folders], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode == 0 and listed.stdout.strip():
        return listed.stdout.split()
    return [
        str(p.relative_to(ROOT))
        for f in folders
        for p in (ROOT / f).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    ]


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "Dockerfile.gpu"])
def test_the_images_copy_every_package_folder(dockerfile):
    """`pip install .` in the image fails on a package folder setup.py names but the build never copied: the
    Dockerfile copies the whole context, and .dockerignore leaves out no package folder nor the files setup.py reads."""
    copied = [line.split()[1:-1] for line in (ROOT / dockerfile).read_text().splitlines() if line.startswith("COPY ")]
    assert ["."] in copied, f"{dockerfile} does not COPY the build context (.) that `pip install` builds from"
    ignored = [line.strip().rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()]
    needed = [*PACKAGES, "setup.py", "pyproject.toml"]
    assert not [name for name in needed if any(fnmatch.fnmatch(name, pattern) for pattern in ignored if pattern)]


if __name__ == "__main__":  # python tests/e2e/test_layout.py [checkout]: the counts the closing note gives
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT
    arrows = models_arrows(import_graph(root))
    pairs = two_way_pairs(arrows)
    print(f"models/ sub-packages: {len(arrows)} arrows, {arrows_up(arrows)} up, {len(pairs)} two-way pairs {pairs}")
