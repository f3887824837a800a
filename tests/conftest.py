"""Shared fixtures: tiny synthetic corpora built in code, so tests never depend on ../shared."""

from __future__ import annotations

import json
import random
import shutil
import socket
import sys
from pathlib import Path

import pytest

from tests.install_mode import checkout_last, use_installed_xtag

INSTALL = use_installed_xtag()  # first, before any test imports xtag: a plain `pip install .` works too


def pytest_report_header() -> str:
    return INSTALL


@pytest.hookimpl(trylast=True)
def pytest_runtest_setup(item) -> None:
    checkout_last()  # after pytest's own setup, which may have imported a test package and put the checkout first


TOPICS = {
    "game::fps": "shooter weapons arena multiplayer frag",
    "game::puzzle": "puzzle tiles blocks solve logic",
    "net::web": "http server browser html proxy",
    "net::mail": "email smtp imap mailbox inbox",
    "lang::python": "python module pip interpreter script",
    "lang::c": "compiler gcc pointer header library",
    "media::audio": "audio sound mixer music player",
    "media::video": "video codec stream movie encoder",
    "sci::math": "algebra matrix equation numeric solver",
    "sci::bio": "genome protein sequence dna biology",
    "x11::app": "window desktop graphical widget toolkit",
    "role::tail": "obscure rare niche tailtopic oddity",
}
FILLER = "the a tool for and with package program data system".split()


def make_rows(n: int, seed: int = 0) -> list[dict]:
    """Documents of 1-3 topics whose words identify them, plus filler words."""
    rng = random.Random(seed)
    names = sorted(t for t in TOPICS if t != "role::tail")
    rows = []
    for i in range(n):
        labels = rng.sample(names, rng.choice([1, 2, 3]))
        if i % 15 == 0:
            labels.append("role::tail")
        words = [w for lab in labels for w in rng.sample(TOPICS[lab].split(), 3)]
        words += rng.sample(FILLER, 4)
        rng.shuffle(words)
        rows.append({"id": f"doc{i}", "text": " ".join(words), "labels": sorted(labels)})
    return rows


def free_port() -> int:
    """A TCP port nobody listens on now: two test runs at once must not share torchrun's rendezvous port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def train_command(config_file: Path, out: Path, launcher: list[str] | None = None) -> list[str]:
    """`xtag train --config FILE --out DIR` as `python -m xtag`, or under `launcher` (`torchrun_launcher`)."""
    command = ["-m", "xtag", "train", "--config", str(config_file), "--out", str(out), "--no-progress"]
    return [*(launcher or [sys.executable]), *command]


def kill_after_first_checkpoint(config_file: Path, out: Path, checkpoint_folder: str) -> list[dict]:
    """Run `xtag train` in a process of its own and SIGKILL it once checkpoints/<folder>/current exists;
    returns the log it left, after checking it left a checkpoint and no finished model."""
    import signal
    import subprocess
    import time

    proc = subprocess.Popen(
        train_command(config_file, out),
        cwd=Path(__file__).resolve().parent.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    state = out / "checkpoints" / checkpoint_folder / "current" / "state.json"
    deadline = time.monotonic() + 120
    while not state.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert state.exists(), "the run never wrote a checkpoint"
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert "done" not in {e["event"] for e in log} and not (out / "model").exists()
    return log


def torchrun_launcher(processes: int) -> list[str]:
    """torchrun with `processes` processes on a free rendezvous port."""
    found = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
    launcher = [found] if found else [sys.executable, "-m", "torch.distributed.run"]  # the module torchrun runs
    return [*launcher, "--nproc-per-node", str(processes), "--master-port", str(free_port())]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="session")
def corpus_files(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("corpus")
    return (
        write_jsonl(folder / "train.jsonl", make_rows(400, seed=1)),
        write_jsonl(folder / "test.jsonl", make_rows(120, seed=2)),
    )


@pytest.fixture(scope="session")
def tiny_bundle(corpus_files, tmp_path_factory) -> Path:
    """A small XR-Linear bundle trained and exported through the public training API."""
    from xtag.models.features.tfidf import TfidfConfig
    from xtag.training.config import TrainConfig
    from xtag.training.export.export_run import export_run
    from xtag.training.run import train_run
    from xtag.training.tree.build import TreeConfig
    from xtag.training.xlinear.config import XLinearConfig

    folder = tmp_path_factory.mktemp("model")
    config = TrainConfig(
        corpus=corpus_files[0],
        tfidf=TfidfConfig(min_df=1),
        xlinear=XLinearConfig(n_jobs=1, tree=TreeConfig(branching=2, max_leaf_size=4)),
    )
    train_run(config, folder / "run", progress=False)
    export_run(folder / "run", folder / "bundle")
    return folder / "bundle"


LABEL_TEXT_ROWS = [  # what tiny_texts_bundle's labels say: a broader tree, a label no document carries, one left out
    {"id": "game", "name": "Games", "description": "Software to play."},
    {"id": "game::fps", "name": "First-person shooters", "alt_labels": ["Ego shooters"], "broader": ["game"]},
    {"id": "game::puzzle", "name": "Puzzles", "description": 'Tiles & logic, "quoted".', "broader": ["game"]},
    {"id": "sci::bio", "name": "Biology", "description": "Genomes and proteins."},
    *({"id": name} for name in sorted(TOPICS) if not name.startswith(("game::", "sci::bio", "role::"))),
]


@pytest.fixture(scope="session")
def tiny_texts_bundle(corpus_files, tmp_path_factory) -> tuple[Path, Path]:
    """(run, bundle) of tiny_bundle's XR-Linear trained with a label file (`--labels`, LABEL_TEXT_ROWS)."""
    from xtag.models.features.tfidf import TfidfConfig
    from xtag.training.config import TrainConfig
    from xtag.training.tree.build import TreeConfig
    from xtag.training.xlinear.config import XLinearConfig

    folder = tmp_path_factory.mktemp("texts")
    config = TrainConfig(
        corpus=corpus_files[0],
        labels=write_jsonl(folder / "labels.jsonl", LABEL_TEXT_ROWS),
        tfidf=TfidfConfig(min_df=1),
        xlinear=XLinearConfig(n_jobs=1, tree=TreeConfig(branching=2, max_leaf_size=4)),
        label_text={"enabled": False},  # the label file alone: the stage it would train has its own fixtures
    )
    return train_and_export(config, folder)


@pytest.fixture(scope="session")
def tiny_bert(corpus_files, tmp_path_factory) -> Path:
    """A tiny randomly initialised BERT (hidden 32, 2 layers) with a WordPiece tokenizer trained on the
    fixture corpus, saved as a local Hugging Face directory: XR-Transformer tests run fast and offline."""
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertModel

    texts = [json.loads(line)["text"] for line in corpus_files[0].read_text().splitlines()]
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=300, special_tokens=specials))
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    tok.decoder = decoders.WordPiece()
    folder = tmp_path_factory.mktemp("tiny-bert")
    tok.save(str(folder / "tokenizer.json"))
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    BertModel(config).save_pretrained(str(folder))
    return folder


def make_xr_config(corpus: Path, encoder: Path, **xr):
    """A small XR-Transformer training config over the fixture corpus and the tiny BERT."""
    from xtag.models.features.tfidf import TfidfConfig
    from xtag.models.xlinear.shortlist import ShortlistConfig
    from xtag.training.config import TrainConfig
    from xtag.training.tree.build import TreeConfig
    from xtag.training.xlinear.config import XLinearConfig
    from xtag.training.xr_transformer.config import XRExportConfig, XRTransformerConfig

    settings = {
        "encoder": encoder,
        "max_length": 32,
        "epochs": 1,
        "batch_size": 32,
        "device": "cpu",
        "tree": TreeConfig(branching=2, max_leaf_size=4),
        "log_every": 5,
        "export": XRExportConfig(shortlist_config=ShortlistConfig(min_nodes=0)),  # tiny tree, index anyway
        **xr,
    }
    return TrainConfig(
        corpus=corpus,
        model="xr-transformer",
        tfidf=TfidfConfig(min_df=1),
        xlinear=XLinearConfig(n_jobs=1, tree=TreeConfig(branching=2, max_leaf_size=4)),
        xr_transformer=XRTransformerConfig(**settings),
    )


@pytest.fixture(scope="session")
def xr_config():
    """The factory `make_xr_config(corpus, encoder, **xr_transformer_settings)`."""
    return make_xr_config


@pytest.fixture(scope="session")
def xr_bundle(corpus_files, tiny_bert, tmp_path_factory) -> tuple[Path, Path]:
    """(run, bundle) of a fine-tuned tiny XR-Transformer, trained and exported through the public API."""
    return train_and_export(make_xr_config(corpus_files[0], tiny_bert), tmp_path_factory.mktemp("xr"))


def train_and_export(config, folder: Path) -> tuple[Path, Path]:
    """folder/run trained with `config` through the public API, then exported to folder/bundle."""
    from xtag.training.export.export_run import export_run
    from xtag.training.run import train_run

    train_run(config, folder / "run", progress=False)
    export_run(folder / "run", folder / "bundle")
    return folder / "run", folder / "bundle"


def lamp_config(corpus, first_stage, encoder, **extra):
    from xtag.models.features.tfidf import TfidfConfig
    from xtag.training.config import TrainConfig
    from xtag.training.lamp.config import LampConfig

    settings = {
        "first_stage": first_stage,
        "encoder": encoder,
        "candidates": 6,
        "max_length": 32,
        "epochs": 3,
        "batch_size": 16,
        "lr": 3e-3,
        "device": "cpu",
        "log_every": 5,
        "export": {"precision": "fp32"},  # the fp32 graph the parity tests read; tests/training/lamp/test_export.py
        **extra,  # checks the default (int8 when it passes its gate)
    }
    return TrainConfig(corpus=corpus, model="lamp", tfidf=TfidfConfig(min_df=1), lamp=LampConfig(**settings))


@pytest.fixture(scope="session")
def lamp_bundle(corpus_files, tiny_bundle, tiny_bert, tmp_path_factory) -> tuple[Path, Path]:
    """(run, bundle): LaMP_pr over tiny_bundle's candidates with the tiny BERT's first layer, trained and exported
    through the public API (shared by the LaMP tests of training, models and service)."""
    config = lamp_config(
        corpus_files[0], tiny_bundle, tiny_bert, graph="pr", heads=2, dim=16, encoder_layers=1, teacher_forcing=True
    )
    return train_and_export(config, tmp_path_factory.mktemp("lamp"))


@pytest.fixture(scope="session")
def old_lamp_bundle(lamp_bundle, tmp_path_factory) -> Path:
    """The LaMP bundle as exported before the graph had attention outputs: its graph cut to the logits."""
    import onnx
    from onnx.utils import Extractor
    from xtag.models.bundle.manifest import sha256

    folder = tmp_path_factory.mktemp("old-lamp") / "bundle"
    shutil.copytree(lamp_bundle[1], folder)
    graph = folder / "lamp" / "model.onnx"
    model = onnx.load(str(graph))
    inputs = [i.name for i in model.graph.input]
    onnx.save(Extractor(model).extract_model(inputs, ["logits"]), str(graph))
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"]["lamp/model.onnx"] = sha256(graph)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def make_lightxml_config(corpus: Path, encoder: Path, **lx):
    """A small LightXML training config over the fixture corpus and the tiny BERT: 12 labels in 4 clusters of 3,
    the generator's top 2 clusters scored by the discriminator."""
    from xtag.models.features.tfidf import TfidfConfig
    from xtag.training.config import TrainConfig
    from xtag.training.lightxml.config import LightXMLConfig

    settings = {
        "encoder": encoder,
        "max_length": 32,
        "last_layers": 2,
        "dropout": 0.1,
        "cluster_size": 3,
        "flat_max_labels": 0,
        "top_clusters": 2,
        "hidden_dim": 16,
        "epochs": 8,
        "batch_size": 16,
        "lr": 5e-3,
        "swa_start": 6,
        "swa_every": 4,
        "device": "cpu",
        "log_every": 5,
        "min_val_documents": 10,  # the fixture corpus holds out 20 documents: enough to exercise model selection
        **lx,
    }
    return TrainConfig(
        corpus=corpus, model="lightxml", tfidf=TfidfConfig(min_df=1), lightxml=LightXMLConfig(**settings)
    )


@pytest.fixture(scope="session")
def lightxml_config():
    """The factory `make_lightxml_config(corpus, encoder, **lightxml_settings)`."""
    return make_lightxml_config


@pytest.fixture(scope="session")
def lightxml_bundle(corpus_files, tiny_bert, tmp_path_factory) -> tuple[Path, Path]:
    """(run, bundle) of a tiny LightXML, trained and exported through the public API."""
    return train_and_export(make_lightxml_config(corpus_files[0], tiny_bert), tmp_path_factory.mktemp("lightxml"))


def add_drift(source: Path, target: Path, output: str, amount: float) -> None:
    """Copy an ONNX graph, adding `amount` to its output `output`: an exporter that drifts from torch."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(source))
    graph = model.graph
    for node in graph.node:
        node.output[:] = [f"{output}_raw" if o == output else o for o in node.output]
    graph.initializer.append(numpy_helper.from_array(np.array(amount, dtype=np.float32), "drift"))
    graph.node.append(helper.make_node("Add", [f"{output}_raw", "drift"], [output]))
    onnx.save(model, str(target))


# A Python preamble for subprocess tests: from here on, importing torch or transformers raises ImportError.
NO_TORCH = """
import importlib.abc, sys

class NoTorch(importlib.abc.MetaPathFinder):  # any import of torch or transformers raises ImportError
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "transformers"):
            raise ImportError(f"{name} is blocked in this test")

sys.meta_path.insert(0, NoTorch())
"""


_PREDICT_WITHOUT_TORCH = (
    NO_TORCH
    + """
import json
from xtag.models.bundle.loader import load_bundle
b = load_bundle(sys.argv[1])
p = b.predictor.predict(json.loads(sys.argv[2]), k=3)
print(json.dumps({"labels": p.labels.tolist(), "scores": p.scores.tolist(),
                  "torch": sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "transformers"))}))
"""
)


def assert_serves_without_torch(bundle: Path, texts: list[str]) -> None:
    """A process where torch and transformers cannot be imported loads `bundle` and predicts what this one does."""
    import subprocess

    import numpy as np
    from xtag.models.bundle.loader import load_bundle

    result = subprocess.run(
        [sys.executable, "-c", _PREDICT_WITHOUT_TORCH, str(bundle), json.dumps(texts)],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.splitlines()[-1])
    expected = load_bundle(bundle).predictor.predict(texts, k=3)
    assert out["torch"] == [] and out["labels"] == expected.labels.tolist()
    assert np.allclose(out["scores"], expected.scores, atol=1e-6)


def edit_bundle(bundle: Path, rel: str, change, member: str | None = None) -> Path:
    """Apply `change` to one file of a bundle (a JSON file's parsed value, a .npy array, or member `member` of a
    .npz) and re-hash it in the manifest: a bundle edited after export, whose checksums still match."""
    import numpy as np
    from xtag.models.bundle.manifest import sha256

    path = bundle / rel
    if rel.endswith(".json"):
        path.write_text(json.dumps(change(json.loads(path.read_text()))))
    elif member is None:
        np.save(path, change(np.load(path)))
    else:
        with np.load(path) as z:
            arrays = {k: z[k] for k in z.files}
        arrays[member] = change(arrays[member])
        np.savez(path, **arrays)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["files"][rel] = sha256(path)
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    return bundle
