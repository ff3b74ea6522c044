"""docs/settings.md, generated from the declarations in ``settings.py``.

A pure function of the ``Settings`` schema: each section a heading (in declaration order,
listed in a table of contents), each setting a row with its dotted path, type and
allowed range, default, environment variable and description. Regenerate with
``python -m headway.settings_reference > docs/settings.md`` (or ``headway config
reference``); tests/unit/repo/test_settings_reference.py fails while the file is stale.
"""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from headway.settings import Settings
from headway.settings_sources import (
    SettingPath,
    defaults_of,
    dotted,
    env_name,
    is_secret,
    section_model,
)

REGENERATE = "python -m headway.settings_reference > docs/settings.md"
_BOUNDS = (
    (annotated_types.Gt, "gt", ">"),
    (annotated_types.Ge, "ge", "≥"),
    (annotated_types.Lt, "lt", "<"),
    (annotated_types.Le, "le", "≤"),
)


def type_name(annotation: Any) -> str:
    """A setting's type as a config file writes it."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):
        named = [type_name(arg) for arg in args if arg is not type(None)]
        return " or ".join(named) + (" or unset" if type(None) in args else "")
    if origin is Literal:
        return "one of " + ", ".join(json.dumps(arg) for arg in args)
    if origin in (tuple, list, frozenset, set):
        return f"list of {type_name(args[0])}" if args else "list"
    if origin is dict:
        return f"table of {type_name(args[1])}"
    if annotation is Path:
        return "path"
    return getattr(annotation, "__name__", str(annotation))


def _allowed(field: FieldInfo) -> str:
    bounds = [
        f"{sign} {getattr(item, attribute)}"
        for item in field.metadata
        for kind, attribute, sign in _BOUNDS
        if isinstance(item, kind)
    ]
    bounds += [
        f"at least {item.min_length} items"
        for item in field.metadata
        if isinstance(item, annotated_types.MinLen)
    ]
    bounds += [
        f"matching `{pattern}`"
        for item in field.metadata
        if (pattern := getattr(item, "pattern", None)) is not None
    ]
    return ", ".join(bounds)


def _default(path: SettingPath) -> str:
    value: Any = defaults_of(Settings)
    for name in path:
        value = value[name]
    if value is None:
        return "unset"
    if is_secret(path) and value:
        return "(secret)"
    if isinstance(value, (frozenset, set)):
        value = sorted(value)
    return f"`{json.dumps(value, default=str)}`"


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def _anchor(title: str) -> str:
    return "".join(ch for ch in title.lower() if ch.isalnum() or ch in "-_ ").replace(" ", "-")


def _sections(
    model: type[BaseModel], prefix: SettingPath, intro: str
) -> list[tuple[SettingPath, str, list[tuple[SettingPath, FieldInfo]]]]:
    """Each section with its introduction and its own settings, then its sub-sections."""
    own = [
        ((*prefix, name), field)
        for name, field in model.model_fields.items()
        if section_model(field) is None
    ]
    found = [(prefix, intro, own)]
    for name, field in model.model_fields.items():
        section = section_model(field)
        if section is not None:
            text = field.description or (section.__doc__ or "")
            found += _sections(section, (*prefix, name), text)
    return found


def reference() -> str:
    """The whole of docs/settings.md."""
    sections = _sections(Settings, (), "")
    out = [
        f"<!-- Generated: {REGENERATE}. Do not edit. -->",
        "",
        "# Settings",
        "",
        "Every setting of `headway`, from its declaration in `src/headway/settings.py`.",
        "Precedence, highest first: command-line flags, environment variables, the",
        "`--config` file (`.toml`, `.json`, `.yaml` or `.yml`), the defaults below. In a",
        "file a setting's dotted path is its table and key (`[gateway]` `chunk_texts = 16`);",
        "its variable joins the sections with `__`. In the environment, lists and tables",
        'are JSON (`HEADWAY_WORKER__MODELS=\'["a", "b"]\'`). A `HEADWAY_*` variable or a',
        "file key that names no setting is an error. `headway config show` prints the",
        "effective settings and where each came from; `headway config check FILE` checks",
        "a file alone.",
        "",
        "## Contents",
        "",
    ]
    for path, _, settings in sections:
        if settings:
            title = dotted(path) or "top level"
            out.append(f"- [{title}](#{_anchor(title)})")
    for path, intro, settings in sections:
        if not settings:
            continue
        out += ["", f"## {dotted(path) or 'top level'}", ""]
        if intro:
            out += [_cell(intro), ""]
        out += ["| Setting | Type | Default | Environment | Description |", "|---|---|---|---|---|"]
        for setting, field in settings:
            kind = type_name(field.annotation)
            if allowed := _allowed(field):
                kind += f"; {allowed}"
            cells = [
                f"`{dotted(setting)}`",
                _cell(kind),
                _cell(_default(setting)),
                f"`{env_name(setting)}`",
                _cell(field.description or ""),
            ]
            out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(reference(), end="")
