"""MkDocs hook: the settings page's table, generated from the Settings class at build time, so a new field
appears in the docs with no hand edit and a removed one disappears. `python docs/hooks/settings_table.py`
prints the same table."""

from __future__ import annotations

import importlib
import inspect
import types
import typing
from collections.abc import Iterator

import annotated_types
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

SETTINGS = "xtag.config.settings:Settings"  # the one Settings class; move this line with it
MARKER = "<!-- settings:table -->"


def on_page_markdown(markdown: str, page, **_) -> str:
    """The marker on the settings page becomes the table (other pages are left as they are)."""
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, settings_table())


def settings_table() -> str:
    """The ungrouped fields' table, then one table per group, under its name and docstring."""
    module, _, name = SETTINGS.partition(":")
    cls = getattr(importlib.import_module(module), name)
    prefix = cls.model_config.get("env_prefix", "")
    groups = [name for name, field in cls.model_fields.items() if _model_type(field.annotation) is not None]
    loose = [_table(_fields(cls, prefix, skip=set(groups)))] if len(groups) < len(cls.model_fields) else []
    sections = []
    for group in groups:
        model = _model_type(cls.model_fields[group].annotation)
        about = " ".join(inspect.getdoc(model).split()) if model.__doc__ else ""
        rows = _table(_fields(cls, prefix, only=group))
        sections.append("\n\n".join(part for part in (f"### {group}", about, rows) if part))
    return "\n\n".join([*loose, *sections])


def _table(fields: Iterator[tuple[str, FieldInfo]]) -> str:
    lines = ["| variable | default | type | what |", "|---|---|---|---|"]
    for env, field in fields:
        lines.append(f"| `{env}` | {_default(field)} | {_type(field)} | {_cell(field.description or '')} |")
    return "\n".join(lines)


def _fields(
    cls: type[BaseModel], prefix: str, only: str | None = None, skip: set[str] = frozenset()
) -> Iterator[tuple[str, FieldInfo]]:
    """(environment variable, field) for every field (of group `only`; not of those in `skip`), nested groups
    flattened the way the class reads them: a group that is a BaseSettings built on its own keeps its own
    env_prefix; a plain model group is read under its parent's name and the nested delimiter when the class sets
    one (XTAG_LIMITS__MAX_K), else under the flat names (XTAG_MAX_K, as config/settings.py reads its groups)."""
    delimiter = cls.model_config.get("env_nested_delimiter")
    for name, field in cls.model_fields.items():
        if (only is not None and name != only) or name in skip:
            continue
        group = _model_type(field.annotation)
        if group is not None and issubclass(group, BaseSettings) and field.default_factory is not None:
            yield from _fields(group, group.model_config.get("env_prefix", ""))
        elif group is not None:
            yield from _fields(group, f"{prefix}{name}{delimiter}".upper() if delimiter else prefix)
        else:
            yield _env_name(field, f"{prefix}{name}".upper()), field


def _env_name(field: FieldInfo, default: str) -> str:
    alias = field.validation_alias
    if isinstance(alias, str):
        return alias
    if alias is not None and hasattr(alias, "choices"):  # AliasChoices: the names it is read from
        return "`, `".join(c for c in alias.choices if isinstance(c, str)) or default
    return default


def _model_type(annotation) -> type[BaseModel] | None:
    return annotation if inspect.isclass(annotation) and issubclass(annotation, BaseModel) else None


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        return "(computed)"
    value = field.default
    if value is PydanticUndefined:
        return "required"
    if value is None:
        return "none"
    if isinstance(value, SecretStr):
        return "(secret)"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value!s}`" if str(value) != "" else '`""`'


def _type(field: FieldInfo) -> str:
    text = _type_name(field.annotation)
    bounds = []
    for meta in field.metadata:
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            if isinstance(meta, getattr(annotated_types, attr.capitalize())):
                bounds.append(f"{sign} {getattr(meta, attr)}")
    return _cell(", ".join([text, *bounds]))


def _type_name(annotation) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " | ".join(f"`{a}`" for a in typing.get_args(annotation))  # _cell escapes the pipes
    if origin in (typing.Union, types.UnionType):
        names = [_type_name(a) for a in typing.get_args(annotation) if a is not type(None)]
        optional = type(None) in typing.get_args(annotation)
        return " or ".join(names) + (" (optional)" if optional else "")
    if annotation is SecretStr:
        return "secret"
    return getattr(annotation, "__name__", str(annotation))


def _cell(text: str) -> str:
    """One table cell: pipes escaped, line breaks folded, and outside code spans `*` kept literal (`/v1/*`)."""
    parts = " ".join(text.replace("|", "\\|").split()).split("`")
    return "`".join(part if i % 2 else part.replace("*", "\\*") for i, part in enumerate(parts))


if __name__ == "__main__":
    print(settings_table())
