"""Where each setting comes from, merged and checked in one place.

Flags > environment > config file > defaults. Each source is read raw (the file
parsed, a variable's text, a flag's value) and merged over the dumped defaults before
anything is validated, so a value equal to its default still beats a lower source, a
section set in part keeps the rest of its defaults, and a check across fields sees
every source at once. The path of every value set is remembered with its ``Source``:
an error names it (the flag as typed, the variable, ``FILE:LINE``), and so does
``headway config show``.

Nothing is guessed: a ``HEADWAY_*`` variable that names no setting, or a key in the
file that names none, is an error suggesting the nearest name; every problem found is
one line of the ``SettingsError``, with pydantic's wording trimmed to what is wrong.

The mechanism is generic over the schema (a pydantic model of nested sections), so
``settings.py`` imports it, never the reverse.
"""

from __future__ import annotations

import difflib
import json
import re
import tomllib
import types
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

M = TypeVar("M", bound=BaseModel)
SettingPath = tuple[str, ...]

ENV_PREFIX = "HEADWAY_"
ENV_DELIMITER = "__"
CONFIG_FORMATS = {".toml": "TOML", ".json": "JSON", ".yaml": "YAML", ".yml": "YAML"}
SECRET_NAMES = re.compile(r"(^|_)(password|token|secret|api_key)$")
"""Settings whose value is never shown (``headway config show``, error lines)."""


class SettingsError(ValueError):
    """Settings that cannot be read or do not validate: one line per problem."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = tuple(problems)


@dataclass(frozen=True)
class Source:
    """Where a value was set: ``where`` is what the user typed or can open."""

    kind: Literal["default", "file", "env", "flag"]
    where: str = ""

    def __str__(self) -> str:
        return self.kind if self.kind == "default" else f"{self.kind} {self.where}"


DEFAULT = Source("default")


@dataclass(frozen=True)
class Resolved(Generic[M]):
    """The validated settings, and the source of every value not left at its default."""

    value: M
    sources: Mapping[SettingPath, Source]

    def source_of(self, path: SettingPath) -> Source:
        return self.sources.get(path, DEFAULT)


# --- the schema -----------------------------------------------------------------------


def section_model(field: FieldInfo) -> type[BaseModel] | None:
    """The model of a section field (one whose value is itself a table of settings)."""
    annotation = field.annotation
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def leaves(
    model: type[BaseModel], prefix: SettingPath = ()
) -> Iterator[tuple[SettingPath, FieldInfo]]:
    """Every setting of ``model``, depth first in declaration order."""
    for name, field in model.model_fields.items():
        section = section_model(field)
        if section is None:
            yield (*prefix, name), field
        else:
            yield from leaves(section, (*prefix, name))


def sections(model: type[BaseModel], prefix: SettingPath = ()) -> Iterator[SettingPath]:
    for name, field in model.model_fields.items():
        section = section_model(field)
        if section is not None:
            yield (*prefix, name)
            yield from sections(section, (*prefix, name))


def model_at(model: type[BaseModel], path: SettingPath) -> type[BaseModel] | None:
    current: type[BaseModel] | None = model
    for name in path:
        field = current.model_fields.get(name) if current else None
        current = section_model(field) if field else None
    return current


def field_at(model: type[BaseModel], path: SettingPath) -> FieldInfo | None:
    parent = model_at(model, path[:-1]) if path else None
    return parent.model_fields.get(path[-1]) if parent else None


def env_name(path: SettingPath) -> str:
    return ENV_PREFIX + ENV_DELIMITER.join(part.upper() for part in path)


def dotted(path: SettingPath) -> str:
    return ".".join(path)


def is_secret(path: SettingPath) -> bool:
    return bool(path) and SECRET_NAMES.search(path[-1]) is not None


def _is_structured(annotation: Any) -> bool:
    """Lists, tables and sections, which the environment gives as JSON."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        return any(_is_structured(arg) for arg in get_args(annotation) if arg is not type(None))
    if origin in (tuple, list, set, frozenset, dict):
        return True
    return isinstance(annotation, type) and issubclass(annotation, (BaseModel, tuple, list, dict))


@cache
def defaults_of(model: type[BaseModel]) -> dict[str, Any]:
    """Every default, as the nested mapping the sources are merged over (never mutated)."""
    return model.model_validate({}).model_dump()


# --- reading each source --------------------------------------------------------------


@dataclass(frozen=True)
class _Layer:
    values: dict[str, Any]
    sources: dict[SettingPath, Source]


def _set_paths(
    model: type[BaseModel] | None, values: Mapping[str, Any], prefix: SettingPath = ()
) -> Iterator[SettingPath]:
    """The paths ``values`` sets: a section's keys one by one, anything else (an unknown
    key included) as one value."""
    for key, value in values.items():
        field = model.model_fields.get(key) if model else None
        section = section_model(field) if field else None
        if section is not None and isinstance(value, Mapping):
            yield from _set_paths(section, value, (*prefix, key))
        else:
            yield (*prefix, str(key))


def _put(values: dict[str, Any], path: SettingPath, value: Any) -> None:
    for name in path[:-1]:
        values = values.setdefault(name, {})
    values[path[-1]] = value


def _lines_of_toml(text: str) -> dict[SettingPath, int]:
    """The line each key and table is set on: a plain scan, enough to point at a line (a
    key inside an inline table is pointed at by its table's line)."""
    key_part = r"""[A-Za-z0-9_-]+|"[^"]*"|'[^']*'"""
    table = re.compile(rf"^\s*\[\s*((?:{key_part})(?:\s*\.\s*(?:{key_part}))*)\s*\]")
    key = re.compile(rf"^\s*((?:{key_part})(?:\s*\.\s*(?:{key_part}))*)\s*=")

    def parts(keys: str) -> SettingPath:
        return tuple(part.strip("\"'") for part in re.findall(key_part, keys))

    lines: dict[SettingPath, int] = {}
    current: SettingPath = ()
    in_string = False
    for number, line in enumerate(text.splitlines(), start=1):
        if in_string:
            in_string = (line.count('"""') + line.count("'''")) % 2 == 0
            continue
        if match := table.match(line):
            current = parts(match.group(1))
            lines.setdefault(current, number)
        elif match := key.match(line):
            lines.setdefault((*current, *parts(match.group(1))), number)
            in_string = (line.count('"""') + line.count("'''")) % 2 == 1
    return lines


def _lines_of_yaml(text: str) -> dict[SettingPath, int]:
    """The line of each key of a YAML (or JSON, which YAML reads) document."""
    lines: dict[SettingPath, int] = {}

    def walk(node: yaml.Node, prefix: SettingPath) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                path = (*prefix, str(key.value))
                lines.setdefault(path, key.start_mark.line + 1)
                walk(value, path)

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return lines
    if root is not None:
        walk(root, ())
    return lines


def parse_config_file(path: Path) -> tuple[dict[str, Any], dict[SettingPath, int]]:
    """A config file's settings and the line of each key; its format by its suffix."""
    kind = CONFIG_FORMATS.get(path.suffix.lower())
    if kind is None:
        accepted = ", ".join(CONFIG_FORMATS)
        raise SettingsError([f"{path}: a config file's name ends in {accepted}"])
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError([f"{path}: cannot be read: {getattr(exc, 'strerror', exc)}"]) from exc
    data: Any
    try:
        if kind == "TOML":
            data, lines = tomllib.loads(text), _lines_of_toml(text)
        elif kind == "JSON":
            data, lines = json.loads(text), _lines_of_yaml(text)
        else:
            data, lines = yaml.safe_load(text), _lines_of_yaml(text)
    except tomllib.TOMLDecodeError as exc:
        at = re.search(r"\(at line (\d+), column \d+\)$", str(exc))
        message = str(exc)[: at.start()].rstrip() if at else str(exc)
        where = f"{path}:{at.group(1)}" if at else str(path)
        raise SettingsError([f"{where}: not valid TOML: {message}"]) from exc
    except json.JSONDecodeError as exc:
        raise SettingsError([f"{path}:{exc.lineno}: not valid JSON: {exc.msg}"]) from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        raise SettingsError([f"{where}: not valid YAML: {problem}"]) from exc
    if data is None and kind == "YAML":
        data = {}
    if not isinstance(data, dict):
        raise SettingsError([f"{path}: the top level must be a table of settings"])
    return data, lines


def _file_layer(model: type[BaseModel], path: Path) -> _Layer:
    data, lines = parse_config_file(path)
    sources: dict[SettingPath, Source] = {}
    for setting in _set_paths(model, data):
        line = next(
            (lines[setting[:n]] for n in range(len(setting), 0, -1) if setting[:n] in lines), None
        )
        sources[setting] = Source("file", f"{path}:{line}" if line else str(path))
    return _Layer(data, sources)


def _unknown_variable(name: str, known: Sequence[str]) -> str:
    upper = name.upper()
    squashed = {candidate.replace(ENV_DELIMITER, "_"): candidate for candidate in known}
    if upper in squashed and squashed[upper] != upper:
        hint = f"; did you mean {squashed[upper]}? (sections are joined by {ENV_DELIMITER})"
    elif close := difflib.get_close_matches(upper, known, n=1, cutoff=0.75):
        hint = f"; did you mean {close[0]}?"
    else:
        hint = f" (every {ENV_PREFIX}* variable is read as a setting: docs/settings.md)"
    return f"{name}: no such setting{hint}"


def _env_layer(model: type[BaseModel], environ: Mapping[str, str]) -> tuple[_Layer, list[str]]:
    paths = {env_name(path): path for path, _ in leaves(model)}
    paths.update({env_name(path): path for path in sections(model)})
    values: dict[str, Any] = {}
    sources: dict[SettingPath, Source] = {}
    problems: list[str] = []
    for name, text in sorted(environ.items()):
        if not name.upper().startswith(ENV_PREFIX):
            continue
        path = paths.get(name.upper())
        if path is None:
            problems.append(_unknown_variable(name, sorted(paths)))
            continue
        field = field_at(model, path)
        value: Any = text
        if field is not None and _is_structured(field.annotation):
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                problems.append(
                    f"{name}: {dotted(path)}: a list or table is given as JSON "
                    f'(e.g. ["a", "b"]): {exc.msg}'
                )
                continue
        _put(values, path, value)
        if isinstance(value, Mapping) and model_at(model, path) is not None:
            section = model_at(model, path)
            for setting in _set_paths(section, value, path):
                sources[setting] = Source("env", name)
        else:
            sources[path] = Source("env", name)
    return _Layer(values, sources), problems


def _flag_layer(
    model: type[BaseModel], flags: Mapping[str, Any], flag_names: Mapping[SettingPath, str]
) -> _Layer:
    sources = {
        path: Source("flag", flag_names.get(path, dotted(path)))
        for path in _set_paths(model, flags)
    }
    return _Layer(dict(flags), sources)


def _deep_merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


# --- validation errors, one line each -------------------------------------------------


def _error_path(model: type[BaseModel], loc: tuple[int | str, ...]) -> tuple[SettingPath, str]:
    """The setting an error is about, and how to show it (``a.b[0]`` for an item)."""
    path: list[str] = []
    shown = ""
    current: type[BaseModel] | None = model
    for part in loc:
        if current is not None and isinstance(part, str):
            path.append(part)
            field = current.model_fields.get(part)
            current = section_model(field) if field else None
            shown = dotted(tuple(path))
        elif isinstance(part, int):
            shown += f"[{part}]"
        elif re.fullmatch(r"[\w-]+", part):
            shown += f".{part}"
    return tuple(path), shown


def _shown_value(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _mentions(message: str, name: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", message) is not None


def _problem(
    model: type[BaseModel], error: Mapping[str, Any], sources: Mapping[SettingPath, Source]
) -> str:
    path, shown = _error_path(model, tuple(error["loc"]))
    kind: str = error["type"]
    message: str = error["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    if kind == "extra_forbidden":
        parent = model_at(model, path[:-1])
        names = list(parent.model_fields) if parent else []
        close = difflib.get_close_matches(path[-1], names, n=1, cutoff=0.6)
        message = "no such setting" + (
            f"; did you mean {dotted((*path[:-1], close[0]))}?" if close else ""
        )
    else:
        message = re.sub(r"^Input should", "should", message)
        message = re.sub(r"^Field required", "is required", message)
        value = error.get("input")
        scalar = isinstance(value, (str, int, float, bool)) or value is None
        if kind != "value_error" and scalar and not is_secret(path) and kind != "missing":
            message += f", got {_shown_value(value)}"
    # A check of a whole section that names the setting it is about: point at that one.
    named = re.match(r"([a-z_][\w.]*): (.*)", message, re.DOTALL)
    if named and model_at(model, path) is not None:
        for candidate in (tuple(named.group(1).split(".")), (*path, *named.group(1).split("."))):
            if field_at(model, candidate) is not None:
                path, shown, message = candidate, dotted(candidate), named.group(2)
                break
    return _located(path, shown, message, sources)


def _located(
    path: SettingPath, shown: str, message: str, sources: Mapping[SettingPath, Source]
) -> str:
    """``WHERE: SETTING: WHAT``, where is every source the problem can be traced to."""
    at = next((sources[path[:n]] for n in range(len(path), 0, -1) if path[:n] in sources), None)
    if at is not None:
        wheres = [at.where]
    else:
        inside = {p: s for p, s in sources.items() if p[: len(path)] == path}
        named = [
            s.where
            for p, s in inside.items()
            if _mentions(message, dotted(p)) or _mentions(message, dotted(p[len(path) :]))
        ]
        wheres = list(dict.fromkeys(named or ([s.where for s in inside.values()] if path else [])))
    where = ", ".join(wheres) if wheres else "the defaults"
    if not shown or where == shown:
        return f"{where}: {message}"
    return f"{where}: {shown}: {message}"


# --- all together ---------------------------------------------------------------------


def resolve(
    model: type[M],
    *,
    config_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
    flag_names: Mapping[SettingPath, str] | None = None,
) -> Resolved[M]:
    """``model`` from flags > ``environ`` > ``config_file`` > defaults; ``flags`` is the
    nested mapping of the flags given, ``flag_names`` each one's flag as typed."""
    layers = [_file_layer(model, config_file)] if config_file is not None else []
    env, problems = _env_layer(model, environ or {})
    layers += [env, _flag_layer(model, flags or {}, flag_names or {})]
    merged: dict[str, Any] = defaults_of(model)
    sources: dict[SettingPath, Source] = {}
    for layer in layers:
        merged = _deep_merge(merged, layer.values)
        for path, source in layer.sources.items():
            for shadowed in [p for p in sources if p[: len(path)] == path]:
                del sources[shadowed]
            sources[path] = source
    try:
        value = model.model_validate(merged)
    except ValidationError as exc:
        problems += [_problem(model, error, sources) for error in exc.errors()]
        raise SettingsError(problems) from exc
    if problems:
        raise SettingsError(problems)
    return Resolved(value, sources)
