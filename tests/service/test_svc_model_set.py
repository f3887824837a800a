"""Which models a server holds (config/model_set.py through Settings): names that are safe in a URL and a metric
label, no name twice, one default, shadows between served models, from flags, XTAG_MODELS, models.toml and --all."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner
from xtag.config.settings import Settings

from xtag.cli import app


def models_of(**settings) -> tuple[list[tuple[str, str]], str | None, dict]:
    ms = Settings(_env_file=None, **settings).model_set
    return [(m.name, str(m.path)) for m in ms.models], ms.default, ms.shadows


def refusal(**settings) -> str:
    with pytest.raises(ValidationError) as exc:
        Settings(_env_file=None, **settings)
    return str(exc.value)


def test_a_bundle_is_served_under_its_directory_name_and_the_first_is_the_default():
    models, default, _ = models_of(bundle="srv/bundles/debtags-xl", models="lamp=srv/other/x, b=srv/y")
    assert models == [("debtags-xl", "srv/bundles/debtags-xl"), ("lamp", "srv/other/x"), ("b", "srv/y")]
    assert default == "debtags-xl"
    assert models_of(bundle="a/x", models="y=a/y", default_model="y")[1] == "y"


@pytest.mark.parametrize("name", ["a/b", "..", "../etc", "a\\b", "-x", "", "x" * 65, "a b"])
def test_a_name_with_path_characters_is_refused(name):
    assert "model name" in refusal(models=f"{name}=bundles/x") or "NAME=VALUE" in refusal(models=f"{name}=bundles/x")


def test_a_duplicate_name_is_refused_whether_derived_or_given():
    assert "'x' is given twice" in refusal(bundle="a/x", models="x=b/other")
    assert "'y' is given twice" in refusal(models="y=a,y=b")


def test_the_default_and_the_shadows_must_be_served():
    assert "default model 'z' is not served" in refusal(bundle="a/x", default_model="z")
    assert "'z' is not served" in refusal(bundle="a/x", models="y=a/y", shadow="z=x")
    assert "cannot shadow itself" in refusal(bundle="a/x", models="y=a/y", shadow="y=y")
    assert models_of(bundle="a/x", models="y=a/y", shadow="y=x")[2] == {"y": "x"}


def test_a_models_file_names_models_paths_relative_to_it_default_and_shadows(tmp_path):
    (tmp_path / "models.toml").write_text(
        'default = "lamp"\n[models]\nxl = "debtags-xl"\nlamp = {path = "debtags-lamp", shadow_of = "xl"}\n'
    )
    models, default, shadows = models_of(models_file=tmp_path / "models.toml")
    assert models == [("xl", str(tmp_path / "debtags-xl")), ("lamp", str(tmp_path / "debtags-lamp"))]
    assert (default, shadows) == ("lamp", {"lamp": "xl"})
    # beside the bundles: read from the bundle root when nothing else names a model
    assert models_of(bundle_root=tmp_path)[0] == models


def test_a_broken_models_file_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "models.toml"
    bad.write_text("[models]\nxl = 3\n")
    assert "models.xl: give a path" in refusal(models_file=bad)
    bad.write_text("[models\n")
    assert "cannot read the models file" in refusal(models_file=bad)


def test_all_serves_every_bundle_under_the_root_once(tmp_path):
    for name in ("b", "a", "not-a-bundle"):
        (tmp_path / name).mkdir()
    for name in ("a", "b"):
        (tmp_path / name / "manifest.json").write_text("{}")
    models, default, _ = models_of(bundle_root=tmp_path, all_bundles=True, bundle=tmp_path / "b")
    assert [n for n, _ in models] == ["b", "a"] and default == "b"
    assert "XTAG_BUNDLE_ROOT" in refusal(all_bundles=True)


def test_xtag_models_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("XTAG_MODELS", "a=bundles/a,b=bundles/b")
    monkeypatch.setenv("XTAG_DEFAULT_MODEL", "b")
    ms = Settings(_env_file=None).model_set
    assert (ms.names, ms.default) == (["a", "b"], "b")


def test_serve_refuses_bad_names_at_start_with_exit_2_and_one_line(tmp_path):
    for name in ("x", "y"):
        (tmp_path / "one" / name).mkdir(parents=True)
        (tmp_path / "two" / name).mkdir(parents=True)
    runner = CliRunner()
    twice = runner.invoke(app, ["serve", str(tmp_path / "one" / "x"), str(tmp_path / "two" / "x")])
    assert twice.exit_code == 2 and "Traceback" not in twice.output
    assert twice.output.strip().splitlines() == [
        "error: model name 'x' is given twice; name one of them with NAME=PATH"
    ]
    slash = runner.invoke(app, ["serve", str(tmp_path / "one" / "x"), "--model", f"a/b={Path(tmp_path / 'two' / 'y')}"])
    assert slash.exit_code == 2 and len(slash.output.strip().splitlines()) == 1 and "'a/b'" in slash.output


def versioned(tmp_path, entry: str) -> Path:
    path = tmp_path / "models.toml"
    path.write_text(f"[models.tags]\n{entry}\n")
    return path


def test_a_models_file_gives_a_model_versions_traffic_and_its_stable_version(tmp_path):
    path = versioned(tmp_path, 'versions = {"1" = "t/1", "2" = "t/2"}\ntraffic = {"1" = 95, "2" = 5}')
    (spec,) = Settings(_env_file=None, models_file=path).model_set.models
    assert spec.versions == {"1": tmp_path / "t/1", "2": tmp_path / "t/2"} and spec.traffic == {"1": 95, "2": 5}
    assert spec.stable == "1" and spec.path == tmp_path / "t/1"  # the heaviest; its bundle is the model's path
    (spec,) = Settings(
        _env_file=None, models_file=versioned(tmp_path, 'versions = {"1" = "a", "2" = "b"}')
    ).model_set.models
    assert spec.stable == "2" and spec.bundles == {"1": tmp_path / "a", "2": tmp_path / "b"}  # the latest


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ('versions = {"1" = "a", "2" = "b"}\ntraffic = {"1" = 60, "2" = 30}', "weights sum to 90, not 100"),
        ('versions = {"1" = "a"}\ntraffic = {"1" = 50, "9" = 50}', "no version '9'"),
        ('versions = {"1" = "a"}\ntraffic = {"1" = 100.0}', "is not a whole number"),
        ('versions = {"1" = "a", "2" = "b"}\ntraffic = {"1" = 110, "2" = -10}', "is not a whole number ≥ 0"),
        ('versions = {"1" = "a"}\nstable = "3"', "stable version '3' is not one of its versions"),
        ('versions = {"a/b" = "a"}', "version 'a/b'"),
        ('versions = {"1" = 5}', "give each version a path"),
        ("versions = {}", "give each version a path"),
        ('path = "a"\ntraffic = {"1" = 100}', "traffic and stable need a versions table"),
    ],
)
def test_a_bad_versions_entry_is_refused_in_one_line(tmp_path, entry, said):
    assert said in refusal(models_file=versioned(tmp_path, entry))


def test_all_serves_a_folder_of_version_folders_as_one_model(tmp_path):
    for folder in ("solo", "tags/1", "tags/2", "tags/10"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "manifest.json").write_text("{}")
    (tmp_path / "tags" / "notes").mkdir()  # no manifest: not a version
    (tmp_path / "empty").mkdir()  # neither a bundle nor versions: not a model
    specs = {m.name: m for m in Settings(_env_file=None, bundle_root=tmp_path, all_bundles=True).model_set.models}
    assert list(specs) == ["solo", "tags"] and specs["solo"].versions == {}
    assert list(specs["tags"].versions) == ["1", "2", "10"] and specs["tags"].stable == "10"
    (tmp_path / "tags" / "2" / "manifest.json").unlink()
    why = Settings(_env_file=None, models_file=versioned(tmp_path, 'versions = {"1" = "tags/1", "2" = "tags/2"}'))
    assert "model tags version 2" in why.model_set.unservable()
