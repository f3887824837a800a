"""Index arrays are checked against their bounds at load (issue 30, defect 3): a bundle whose checksums match
but whose indices are wrong is refused, naming the file and array, and no mutation of its index arrays can
make the process die: the compiled kernels, scipy and FAISS read through them unchecked."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from xtag.models.bundle.loader import load_bundle
from xtag.models.bundle.manifest import sha256
from xtag.models.engine.checks import SHAPES
from xtag.models.errors import XtagError

from tests.conftest import edit_bundle

ROOT = Path(__file__).resolve().parents[3]
ENGINE = [f"rankers/engine/{name}.npy" for name, (dtype, _) in SHAPES.items() if dtype.startswith("int")]
INDEX_ARRAYS = [
    *((rel, None) for rel in ENGINE),
    ("rankers/engine/leaf_labels.npy", None),
    ("tree/chain.npz", "ptr_0"),
    ("tree/chain.npz", "ptr_1"),
    ("tree/chain.npz", "leaf_labels"),
    ("rankers/level_1.npz", "indices"),
    ("rankers/level_1.npz", "indptr"),
    ("rankers/level_1.npz", "shape"),
    ("shortlist/columns.npy", None),
]


def rehash(bundle: Path, rel: str) -> None:
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["files"][rel] = sha256(bundle / rel)
    (bundle / "manifest.json").write_text(json.dumps(manifest))


def with_hnsw_shortlist(bundle: Path) -> Path:
    """The bundle plus an HNSW level-1 shortlist component (export writes one only for XR-Transformer)."""
    from xtag.models.xlinear.model import XLinearModel
    from xtag.models.xlinear.shortlist import FaissShortlist, ShortlistConfig

    model = XLinearModel.load(bundle)
    config = ShortlistConfig(min_nodes=0, exact_max_nodes=0, hnsw_m=4)
    FaissShortlist.build(model.levels[0], model.config.n_features, config).save(bundle / "shortlist")
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["components"].append({"type": "shortlist", "path": "shortlist"})
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    for name in ("columns.npy", "config.json", "faiss.index"):
        rehash(bundle, f"shortlist/{name}")
    return bundle


@pytest.fixture(scope="module")
def bundle(tiny_bundle, tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("bounds") / "bundle"
    shutil.copytree(tiny_bundle, target)
    return with_hnsw_shortlist(target)


@pytest.fixture
def copy(bundle, tmp_path) -> Path:
    shutil.copytree(bundle, tmp_path / "b")
    return tmp_path / "b"


def test_the_bundle_with_all_its_index_arrays_loads_and_predicts(bundle):
    """The checks refuse nothing an export writes, and the list below covers every integer array it holds."""
    predictor = load_bundle(bundle).predictor
    assert predictor.named(predictor.predict(["python script", "audio player"], k=3))[0]
    files = json.loads((bundle / "manifest.json").read_text())["files"]
    held = set()
    for rel in files:
        if rel.endswith(".npy") and np.load(bundle / rel).dtype.kind in "iu":
            held.add((rel, None))
        elif rel.endswith(".npz"):
            with np.load(bundle / rel) as z:
                held |= {(rel, k) for k in z.files if z[k].dtype.kind in "iu"}
    assert {kind(rel, m) for rel, m in held} == {kind(rel, m) for rel, m in INDEX_ARRAYS}


def kind(rel: str, member: str | None) -> tuple[str, str | None]:
    """Levels and tree pointers alike count once: rankers/level_N.npz, ptr_N."""
    rel = "rankers/level_N.npz" if rel.startswith("rankers/level_") else rel
    return rel, "ptr_N" if member and member.startswith("ptr_") else member


def one_negative(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a.reshape(-1)[a.size // 2] = -2
    return a


@pytest.mark.parametrize(
    "change",
    [lambda a: np.full_like(a, 50_000_000), one_negative],
    ids=["all-50000000", "one-negative"],  # the issue's bundle: every value of fm_node.npy set to 50,000,000
)
@pytest.mark.parametrize(("rel", "member"), INDEX_ARRAYS, ids=[f"{r}[{m}]" if m else r for r, m in INDEX_ARRAYS])
def test_an_out_of_range_index_array_is_refused_by_name(copy, rel, member, change):
    edit_bundle(copy, rel, change, member)
    with pytest.raises(XtagError) as refused:
        load_bundle(copy)
    message = str(refused.value)
    assert rel in message and (member is None or member in message), message


def test_an_hnsw_graph_whose_search_would_leave_its_links_is_refused(copy):
    """FAISS checks each link's range when it reads an index, not that the search's start level exists on the
    entry point: searching from level 5 would read five levels of links past the entry point's own."""
    import faiss

    path = copy / "shortlist" / "faiss.index"
    index = faiss.read_index(str(path))
    index.hnsw.max_level = 5
    faiss.write_index(index, str(path))
    rehash(copy, "shortlist/faiss.index")
    with pytest.raises(XtagError, match=r"shortlist/faiss\.index \(entry point\)"):
        load_bundle(copy)


def test_an_hnsw_search_breadth_past_its_nodes_is_refused(copy):
    """efSearch sizes every request's search like a beam (issue 38's beam_size of 10^9): at most the index's nodes,
    or the default breadth where they are fewer."""
    config = json.loads((copy / "shortlist" / "config.json").read_text())
    config["config"]["ef_search"] = 10**9
    (copy / "shortlist" / "config.json").write_text(json.dumps(config))
    rehash(copy, "shortlist/config.json")
    with pytest.raises(XtagError, match=r"shortlist/config\.json: ef_search 1000000000 is above its nodes"):
        load_bundle(copy)


def test_predict_refuses_the_issue_bundle_instead_of_crashing(copy):
    """`xtag predict` on the issue's bundle exited 139 (SIGSEGV); it now says which file is wrong."""
    edit_bundle(copy, "rankers/engine/fm_node.npy", lambda a: np.full_like(a, 50_000_000))
    done = subprocess.run(
        [sys.executable, "-m", "xtag", "predict", str(copy), "python script"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode > 0 and "fm_node.npy" in done.stderr, (done.returncode, done.stderr)  # < 0: a signal


def test_fuzzed_index_arrays_are_refused_or_served_never_fatal(bundle):
    """30 mutations (random values, swaps, shifts, cut-and-padded, wrong lengths and dtypes) of random index arrays
    and layout numbers, each re-hashed: the load refuses it with an XtagError or predictions run, and the child
    process that runs them never dies (bench/bundle_fuzz.py; it ran 2,000 for issue 30's report). Before them,
    each of the fuzzer's named cases (issue 38: vocabulary columns, idf, label names, beam, NaN) is refused."""
    done = subprocess.run(
        [sys.executable, "bench/bundle_fuzz.py", "--bundle", str(bundle), "--mutations", "30", "--seed", "30"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    result = json.loads(done.stdout)
    counts = result["counts"]
    assert counts["error"] == counts["crash"] == counts["hang"] == 0, result["failures"]
    assert counts["refused"] + counts["served"] == 30 and counts["refused"] >= 10, counts
    cases = result["cases"]
    assert not cases["failures"] and cases["counts"]["refused"] == len(cases["refused_with"]) >= 12, cases
    assert "case: vocabulary column 50,000,000" in cases["refused_with"], cases
