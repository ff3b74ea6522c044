"""A load spec, read strictly: a TOML or JSON file (or CLI-like arguments) → workload + schedule.

    arrivals = "poisson"          # or "fixed" (the default)
    seed = 1                      # arrivals and request bodies (default 0)

    [[class]]                     # one or more
    name = "interactive"
    key = "demo-key-search-app"   # the tenant's API key
    weight = 1                    # share of the requests (default 1)
    tier = "interactive"          # a label for reports (default "interactive")
    model = "synthetic"           # default all-MiniLM-L6-v2
    texts = [1, 4]                # texts per request: a number or [low, high] (default 1)
    words = [8, 40]               # words per text: a number or [low, high] (default [8, 40])
    timeout_ms = 1000             # X-Timeout-Ms, and the goodput deadline (default 1000)

    [[step]]                      # one or more, run in order
    seconds = 10
    rps = 200

A key the spec does not define, a value of the wrong type (``true`` is not a
number, ``2.5`` is not a count) or a missing required key is rejected with an
``InvalidSpec`` that names the place, e.g. ``class[1]: unknown key 'wieght'``.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from headway_tools.loadgen.errors import InvalidSpec
from headway_tools.loadgen.schedule import ARRIVALS, Arrivals, Schedule, Step
from headway_tools.loadgen.workload import DEFAULT_MODEL, RequestClass, Workload

_TOP_KEYS = {"arrivals", "seed", "class", "step"}
_CLASS_KEYS = {"name", "key", "weight", "tier", "model", "texts", "words", "timeout_ms"}
_STEP_KEYS = {"seconds", "rps"}


class LoadSpec(NamedTuple):
    workload: Workload
    schedule: Schedule


def load_spec(path: Path) -> LoadSpec:
    """A spec file: JSON when it ends in ``.json``, TOML otherwise."""
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except OSError as exc:
        raise InvalidSpec(f"{path}: cannot read: {exc}") from exc
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        kind = "JSON" if path.suffix == ".json" else "TOML"
        raise InvalidSpec(f"{path}: not valid {kind}: {exc}") from exc
    try:
        return parse_spec(data)
    except InvalidSpec as exc:
        raise InvalidSpec(f"{path}: {exc}") from exc


def parse_spec(data: Any) -> LoadSpec:
    """A spec from its parsed TOML/JSON document."""
    table = _table(data, "spec", _TOP_KEYS, required={"class", "step"})
    classes = _array(table["class"], "class")
    steps = _array(table["step"], "step")
    seed = _int(table.get("seed", 0), "seed")
    arrivals = _arrivals(table.get("arrivals", "fixed"))
    return LoadSpec(
        Workload(tuple(_class(c, f"class[{i}]") for i, c in enumerate(classes)), seed=seed),
        Schedule(
            tuple(_step(s, f"step[{i}]") for i, s in enumerate(steps)), arrivals=arrivals, seed=seed
        ),
    )


def spec_from_args(
    *,
    rate: float,
    duration: float,
    key: str,
    model: str = DEFAULT_MODEL,
    texts: int | tuple[int, int] = 1,
    words: int | tuple[int, int] = (8, 40),
    timeout_ms: int = 1000,
    arrivals: str = "fixed",
    seed: int = 0,
    name: str = "default",
    tier: str = "interactive",
) -> LoadSpec:
    """One request class at one rate: what ``headway loadgen --rate --duration ...`` asks for."""
    cls = RequestClass(
        name=name,
        key=key,
        tier=tier,
        model=model,
        texts=texts if isinstance(texts, tuple) else (texts, texts),
        words=words if isinstance(words, tuple) else (words, words),
        timeout_ms=timeout_ms,
    )
    schedule = Schedule((Step(duration, rate),), arrivals=_arrivals(arrivals), seed=seed)
    return LoadSpec(Workload((cls,), seed=seed), schedule)


def parse_range(text: str) -> tuple[int, int]:
    """``"3"`` → (3, 3); ``"1-4"`` → (1, 4): a count or range as typed on a command line."""
    low, sep, high = text.partition("-")
    try:
        return (int(low), int(high)) if sep else (int(low), int(low))
    except ValueError as exc:
        raise InvalidSpec(f"expected a count N or a range LOW-HIGH, not {text!r}") from exc


# -- strict readers ----------------------------------------------------------------


def _table(
    value: Any, where: str, known: set[str], required: Iterable[str] = ()
) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidSpec(f"{where}: expected a table, not {type(value).__name__}")
    unknown = sorted(set(value) - known)
    if unknown:
        names = ", ".join(map(repr, unknown))
        raise InvalidSpec(f"{where}: unknown key {names} (known: {', '.join(sorted(known))})")
    missing = sorted(set(required) - set(value))
    if missing:
        raise InvalidSpec(f"{where}: missing {', '.join(map(repr, missing))}")
    return value


def _array(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise InvalidSpec(f"{where}: expected one or more [[{where}]] tables")
    return value


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidSpec(f"{where}: expected an integer, not {value!r}")
    return value


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidSpec(f"{where}: expected a number, not {value!r}")
    return float(value)


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise InvalidSpec(f"{where}: expected a string, not {value!r}")
    return value


def _range(value: Any, where: str) -> tuple[int, int]:
    if isinstance(value, list):
        if len(value) != 2:
            raise InvalidSpec(f"{where}: expected [low, high], not {value!r}")
        return _int(value[0], where), _int(value[1], where)
    count = _int(value, where)
    return count, count


def _arrivals(value: Any) -> Arrivals:
    for arrivals in ARRIVALS:
        if value == arrivals:
            return arrivals
    raise InvalidSpec(f"arrivals: expected one of {', '.join(ARRIVALS)}, not {value!r}")


def _class(value: Any, where: str) -> RequestClass:
    table = _table(value, where, _CLASS_KEYS, required={"name", "key"})
    return RequestClass(
        name=_str(table["name"], f"{where}.name"),
        key=_str(table["key"], f"{where}.key"),
        weight=_number(table.get("weight", 1), f"{where}.weight"),
        tier=_str(table.get("tier", "interactive"), f"{where}.tier"),
        model=_str(table.get("model", DEFAULT_MODEL), f"{where}.model"),
        texts=_range(table.get("texts", 1), f"{where}.texts"),
        words=_range(table.get("words", [8, 40]), f"{where}.words"),
        timeout_ms=_int(table.get("timeout_ms", 1000), f"{where}.timeout_ms"),
    )


def _step(value: Any, where: str) -> Step:
    table = _table(value, where, _STEP_KEYS, required=_STEP_KEYS)
    seconds = _number(table["seconds"], f"{where}.seconds")
    rps = _number(table["rps"], f"{where}.rps")
    try:
        return Step(seconds, rps)
    except InvalidSpec as exc:
        raise InvalidSpec(f"{where}: {exc}") from exc
