"""Which models one server holds: each a name and a bundle path (or several versions, each a bundle path, and
the traffic between them), one the default, some the shadow of another.

Gathered from the command line, XTAG_BUNDLE, XTAG_MODELS, a models.toml and XTAG_BUNDLE_ROOT with --all
(config/settings.py puts them together), and refused at start, in one line, when a name could not be a URL
segment and a metric label, or is given twice.

A bundle given without a name is served under its directory's name (`bundles/debtags-xl` → `debtags-xl`): that
name is known before anything loads, so that a duplicate is refused at start, not after minutes of loading.

Versions (issue 50): a folder of bundles under the root, ROOT/NAME/VERSION/ (Triton's layout), or a models.toml
entry's `versions` table, serve one model NAME; `traffic` splits its requests between them by weight (whole
percents summing to 100; service/rollout/traffic.py routes them). A model served from ROOT/NAME/ is one version,
DEFAULT_VERSION.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from pydantic import BaseModel, ValidationError, field_validator, model_validator
from xtag.config.rollout_policy import RolloutPolicy, read_rollouts
from xtag.models.bundle.manifest import MANIFEST, not_a_bundle

# A URL path segment, a Prometheus label value, an Annif project id; no "..". The OpenAPI states the same pattern
# for every {name} and {project_id} (service/http/openapi_limits.py).
NAME_PATTERN = r"^(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
NAME = re.compile(NAME_PATTERN)
MODELS_FILE = "models.toml"  # read from XTAG_BUNDLE_ROOT when no model is configured otherwise
DEFAULT_VERSION = "1"  # the one version of a model served from a single bundle (Triton numbers versions from 1)
TOTAL_WEIGHT = 100  # a model's traffic weights are whole percents


def version_order(names) -> list[str]:
    """Versions in the order they are listed and routed: numbers by value (Triton's 1, 2, 10), then the others."""
    return sorted(names, key=lambda v: (0, int(v), "") if v.isdigit() else (1, 0, v))


def weights_problem(weights: dict, versions) -> tuple[str, str] | None:
    """(code, why) when `weights` cannot route a model's traffic over `versions`: an unknown version, a weight that
    is not a whole number ≥ 0, or a sum other than 100; None when they can. The one check, for models.toml and for
    every change at run time (service/rollout/traffic.py)."""
    unknown = [v for v in weights if v not in versions]
    if unknown:
        return "unknown-version", f"no version {unknown[0]!r} (versions: {', '.join(versions)})"
    for version, weight in weights.items():
        if isinstance(weight, bool) or not isinstance(weight, int) or weight < 0:
            return "invalid-weights", f"weight of version {version}: {weight!r} is not a whole number ≥ 0"
    total = sum(weights.values())
    if total != TOTAL_WEIGHT:
        split = ", ".join(f"{v}={w}" for v, w in weights.items())
        return "invalid-weights", f"weights sum to {total}, not {TOTAL_WEIGHT} ({split})"
    return None


class ModelSpec(BaseModel):
    """One served model: its name in routes (/v1/models/NAME/...) and the bundle directory it loads from; or its
    `versions` (name → bundle directory), the `traffic` between them and the `stable` one, whose bundle is `path`.

    Without `traffic` the stable version takes it all; the stable one is the one named, else the heaviest, else
    the latest (Triton's default policy)."""

    name: str
    path: Path | None = None
    versions: dict[str, Path] = {}
    traffic: dict[str, int] = {}
    stable: str | None = None

    @field_validator("name")
    @classmethod
    def _plain_name(cls, name: str) -> str:
        if not NAME.fullmatch(name):
            raise ValueError(
                f"model name {name!r}: use letters, digits, '.', '_' and '-' (at most 64, no path characters)"
            )
        return name

    @model_validator(mode="after")
    def _versions(self) -> ModelSpec:
        if not self.versions:
            if self.path is None:
                raise ValueError(f"model {self.name}: give a bundle path or its versions")
            if self.traffic or self.stable is not None:
                raise ValueError(f"model {self.name}: traffic and stable need a versions table")
            return self
        for version in self.versions:
            if not NAME.fullmatch(version):
                raise ValueError(f"model {self.name}: version {version!r}: use letters, digits, '.', '_' and '-'")
        problem = weights_problem(self.traffic, list(self.versions)) if self.traffic else None
        if problem is not None:
            raise ValueError(f"model {self.name}: traffic: {problem[1]}")
        if self.stable is None:
            heaviest = max(self.traffic.values(), default=None)
            self.stable = next((v for v, w in self.traffic.items() if w == heaviest), list(self.versions)[-1])
        if self.stable not in self.versions:
            raise ValueError(f"model {self.name}: stable version {self.stable!r} is not one of its versions")
        self.path = self.versions[self.stable]
        return self

    @property
    def bundles(self) -> dict[str, Path]:
        """Each version's bundle directory (one, DEFAULT_VERSION, for a model without versions)."""
        return dict(self.versions) or {DEFAULT_VERSION: self.path}


class ModelSet(BaseModel):
    """The models of one server, in order; `default` answers /v1/predict, `shadows` maps NEW to the OLD it shadows,
    `shadow_fractions` a shadow to the share of its primary's documents it scores (absent: all of them),
    `rollouts` a model to the rollout policy it starts with (models.toml's [rollouts.NAME])."""

    models: list[ModelSpec] = []
    default: str | None = None
    shadows: dict[str, str] = {}
    shadow_fractions: dict[str, float] = {}
    rollouts: dict[str, RolloutPolicy] = {}

    @model_validator(mode="after")
    def _consistent(self) -> ModelSet:
        names = [m.name for m in self.models]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"model name {twice[0]!r} is given twice; name one of them with NAME=PATH")
        if self.default is None and names:
            self.default = names[0]
        if self.default is not None and self.default not in names:
            raise ValueError(f"default model {self.default!r} is not served (models: {', '.join(names) or 'none'})")
        for new, old in self.shadows.items():
            for name in (new, old):
                if name not in names:
                    raise ValueError(f"shadow {new}={old}: {name!r} is not served (models: {', '.join(names)})")
            if new == old:
                raise ValueError(f"shadow {new}={old}: a model cannot shadow itself")
        for new, fraction in self.shadow_fractions.items():
            if new not in self.shadows:
                raise ValueError(f"shadow fraction of {new!r}: it is not a shadow (shadows: {', '.join(self.shadows)})")
            if not 0.0 < fraction <= 1.0:
                raise ValueError(f"shadow fraction of {new!r}: {fraction:g} is not in (0, 1]")
        for name in self.rollouts:
            if name not in names:
                raise ValueError(f"rollouts.{name}: {name!r} is not served (models: {', '.join(names)})")
        return self

    @property
    def names(self) -> list[str]:
        return [m.name for m in self.models]

    def unservable(self) -> str | None:
        """Why the first model whose path holds no bundle cannot be served, naming the model and the path; None when
        every path holds a manifest. `xtag serve` asks before it binds or loads anything: a typo in the second
        --model was found only after the first had loaded, and the error named neither (issue 47)."""
        for spec in self.models:
            for version, path in spec.bundles.items():
                if not (path / MANIFEST).is_file():
                    named = f" version {version}" if spec.versions else ""
                    return f"model {spec.name}{named}: {path}: {not_a_bundle(path)}"
        return None


def gather(
    bundle: Path | None,
    models: str | None,
    models_file: Path | None,
    root: Path | None,
    every_bundle: bool,
    default: str | None,
    shadow: str | None,
    shadow_fraction: str | None = None,
) -> ModelSet:
    """The models in the order given: XTAG_BUNDLE (the first argument of `xtag serve`), XTAG_MODELS, the models
    file (XTAG_MODELS_FILE, else XTAG_BUNDLE_ROOT/models.toml when nothing else names a model), then with --all
    every other bundle under the root; the default is XTAG_DEFAULT_MODEL, the file's, or the first."""
    try:
        specs = [ModelSpec(name=bundle_name(bundle), path=bundle)] if bundle is not None else []
        specs += [ModelSpec(name=name, path=Path(path)) for name, path in pairs(models, "XTAG_MODELS")]
        shadows, rollouts = dict(pairs(shadow, "XTAG_SHADOW")), {}
        fractions: dict[str, float] = {}
        if models_file is None and root is not None and not specs and not every_bundle:
            models_file = Path(root) / MODELS_FILE if (Path(root) / MODELS_FILE).is_file() else None
        if models_file is not None:
            listed, file_default, file_shadows, fractions = read_models_file(models_file)
            specs += listed
            default = default or file_default
            shadows = {**file_shadows, **shadows}
            rollouts = read_rollouts(models_file)
        if every_bundle:
            if root is None:
                raise ValueError("--all (XTAG_ALL_BUNDLES) serves every bundle under XTAG_BUNDLE_ROOT: set it")
            taken = {Path(p).resolve() for s in specs for p in s.bundles.values()}
            specs += [s for s in bundles_under(root) if s.path.resolve() not in taken]
        fractions.update(shadow_fractions(shadow_fraction, shadows))
        return ModelSet(models=specs, default=default, shadows=shadows, shadow_fractions=fractions, rollouts=rollouts)
    except ValidationError as exc:  # one line, the validator's own words
        error = exc.errors(include_url=False)[0]
        cause = (error.get("ctx") or {}).get("error")
        raise ValueError(str(cause) if isinstance(cause, Exception) else error["msg"]) from None


def bundle_name(path: Path) -> str:
    """The name a bundle is served under when none is given: its directory's name."""
    return Path(path).name or Path(path).resolve().name


def pairs(text: str | None, what: str) -> list[tuple[str, str]]:
    """`a=x,b=y` as [(a, x), (b, y)]; spaces around items are ignored."""
    out = []
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise ValueError(f"{what}: {item!r} is not NAME=VALUE")
        out.append((name.strip(), value.strip()))
    return out


def shadow_fractions(text: str | None, shadows: dict[str, str]) -> dict[str, float]:
    """XTAG_SHADOW_FRACTION: `NEW=F,...` per shadow, or a bare `F` for every shadow."""
    if text is None or not text.strip():
        return {}
    items = pairs(text, "XTAG_SHADOW_FRACTION") if "=" in text else [(new, text.strip()) for new in shadows]
    try:
        return {new: float(value) for new, value in items}
    except ValueError:
        raise ValueError(f"XTAG_SHADOW_FRACTION: {text!r}: give F or NEW=F,... with F a number in (0, 1]") from None


def read_models_file(path: Path) -> tuple[list[ModelSpec], str | None, dict[str, str], dict[str, float]]:
    """A models.toml: `default = "NAME"` and a `[models]` table of NAME = "PATH" or NAME = {path = "PATH",
    shadow_of = "OLD", shadow_fraction = F}, or a model with versions: NAME = {versions = {V = "PATH", ...},
    traffic = {V = WEIGHT, ...}, stable = "V"} (traffic and stable optional); relative paths are read from the file's
    directory."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: cannot read the models file ({exc})") from None
    specs, shadows, fractions = [], {}, {}
    table = data.get("models")
    if not isinstance(table, dict) or not table:
        raise ValueError(f'{path}: a [models] table of NAME = "PATH" is required')
    for name, entry in table.items():
        entry = {"path": entry} if isinstance(entry, str) else entry
        if isinstance(entry, dict) and isinstance(entry.get("versions"), dict) and "path" not in entry:
            specs.append(_versioned(path, name, entry))
        elif not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            raise ValueError(
                f'{path}: models.{name}: give a path (NAME = "PATH" or NAME = {{path = "PATH"}}) or a versions table '
                '(NAME = {versions = {"1" = "PATH", ...}})'
            )
        else:  # traffic or stable without versions: refused by ModelSpec
            rollout = {key: entry[key] for key in ("traffic", "stable") if key in entry}
            specs.append(ModelSpec(name=name, path=Path(path).parent / entry["path"], **rollout))
        if "shadow_of" in entry:
            shadows[name] = str(entry["shadow_of"])
        if "shadow_fraction" in entry:
            if not isinstance(entry["shadow_fraction"], int | float) or isinstance(entry["shadow_fraction"], bool):
                raise ValueError(f"{path}: models.{name}.shadow_fraction: give a number in (0, 1]")
            fractions[name] = float(entry["shadow_fraction"])
    default = data.get("default")
    return specs, None if default is None else str(default), shadows, fractions


def _versioned(path: Path, name: str, entry: dict) -> ModelSpec:
    """A models.toml entry with a versions table (read_models_file)."""
    versions = entry["versions"]
    bad = next((v for v, p in versions.items() if not isinstance(p, str)), None)
    if bad is not None or not versions:
        raise ValueError(f'{path}: models.{name}.versions: give each version a path ({bad or "1"} = "PATH")')
    traffic = entry.get("traffic", {})
    if not isinstance(traffic, dict):
        raise ValueError(f"{path}: models.{name}.traffic: a table of VERSION = WEIGHT")
    problem = weights_problem(traffic, [str(v) for v in versions]) if traffic else None
    if problem is not None:  # before pydantic, which would read 95.0 as 95
        raise ValueError(f"{path}: models.{name}.traffic: {problem[1]}")
    stable = entry.get("stable")
    return ModelSpec(
        name=name,
        versions={str(v): Path(path).parent / p for v, p in versions.items()},
        traffic={str(v): w for v, w in traffic.items()},
        stable=None if stable is None else str(stable),
    )


def bundles_under(root: Path) -> list[ModelSpec]:
    """Every bundle directory (one holding a manifest.json) directly under `root`, by name; and every folder of
    version directories (ROOT/NAME/VERSION/manifest.json, Triton's layout) as one model with those versions."""
    if not Path(root).is_dir():
        raise ValueError(f"{root}: the bundle root (XTAG_BUNDLE_ROOT) is not a directory")
    specs = []
    for p in sorted(p for p in Path(root).iterdir() if p.is_dir()):
        if (p / MANIFEST).is_file():
            specs.append(ModelSpec(name=bundle_name(p), path=p))
            continue
        found = {v.name: v for v in p.iterdir() if (v / MANIFEST).is_file()}
        if found:
            specs.append(ModelSpec(name=bundle_name(p), versions={v: found[v] for v in version_order(found)}))
    if not specs:
        raise ValueError(
            f"{root}: no bundle directory (with a manifest.json) under the bundle root, nor any NAME/VERSION/ "
            "folder of them"
        )
    return specs
