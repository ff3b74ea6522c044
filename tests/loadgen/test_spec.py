import json
import tomllib

import pytest

from headway_tools.loadgen.errors import InvalidSpec
from headway_tools.loadgen.schedule import Schedule, Step
from headway_tools.loadgen.spec import load_spec, parse_range, parse_spec, spec_from_args
from headway_tools.loadgen.workload import RequestClass, Workload

EXAMPLE = """
arrivals = "poisson"
seed = 1

[[class]]
name = "interactive"
weight = 1
key = "demo-key-search-app"
texts = [1, 4]
words = [8, 40]
timeout_ms = 1000
model = "synthetic"

[[class]]
name = "batch"
weight = 0.5
key = "demo-key-nightly-index"
tier = "batch"
texts = 32

[[step]]
seconds = 10
rps = 200

[[step]]
seconds = 5
rps = 1000
"""


def test_the_example_spec():
    workload, schedule = parse_spec(tomllib.loads(EXAMPLE))
    assert workload == Workload(
        (
            RequestClass(
                "interactive",
                "demo-key-search-app",
                texts=(1, 4),
                words=(8, 40),
                timeout_ms=1000,
                model="synthetic",
            ),
            RequestClass(
                "batch", "demo-key-nightly-index", weight=0.5, tier="batch", texts=(32, 32)
            ),
        ),
        seed=1,
    )
    assert schedule == Schedule((Step(10, 200), Step(5, 1000)), arrivals="poisson", seed=1)


def test_files_in_toml_and_json(tmp_path):
    toml_file = tmp_path / "load.toml"
    toml_file.write_text(EXAMPLE)
    json_file = tmp_path / "load.json"
    json_file.write_text(json.dumps(tomllib.loads(EXAMPLE)))
    assert load_spec(toml_file) == load_spec(json_file)


def test_unreadable_files_name_the_path(tmp_path):
    broken = tmp_path / "broken.toml"
    broken.write_text("[[class]\n")
    with pytest.raises(InvalidSpec, match=r"broken\.toml: not valid TOML"):
        load_spec(broken)
    with pytest.raises(InvalidSpec, match="cannot read"):
        load_spec(tmp_path / "missing.toml")
    bad_value = tmp_path / "bad.json"
    bad_value.write_text('{"class": [{"name": "a", "key": "k"}], "step": [{"seconds": 1}]}')
    with pytest.raises(InvalidSpec, match=r"bad.json: step\[0\]: missing 'rps'"):
        load_spec(bad_value)


def spec(**changes):
    document = {
        "class": [{"name": "a", "key": "k"}],
        "step": [{"seconds": 1, "rps": 10}],
    }
    for path, value in changes.items():
        target = document
        *parents, last = path.split("__")
        for part in parents:
            target = target[part][0] if part in ("class", "step") else target[part]
        target[last] = value
    return document


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (spec(duration=3), r"spec: unknown key 'duration' \(known: arrivals, class, seed, step\)"),
        (spec(class__wieght=2), r"class\[0\]: unknown key 'wieght'"),
        (spec(step__rate=2), r"step\[0\]: unknown key 'rate'"),
        (spec(class__weight=True), r"class\[0\].weight: expected a number, not True"),
        (spec(class__timeout_ms=2.5), r"class\[0\].timeout_ms: expected an integer"),
        (spec(class__texts=[1, 2, 3]), r"class\[0\].texts: expected \[low, high\]"),
        (spec(class__texts=[4, 1]), r"class 'a': texts must be a range"),
        (spec(class__key=7), r"class\[0\].key: expected a string"),
        (spec(step__seconds=0), r"step\[0\]: a step lasts a positive number"),
        (spec(step__rps="10"), r"step\[0\].rps: expected a number"),
        (spec(arrivals="bursty"), "arrivals: expected one of fixed, poisson"),
        (spec(seed="1"), "seed: expected an integer"),
        (spec(step=[]), r"step: expected one or more \[\[step\]\] tables"),
        ({"class": [{"name": "a", "key": "k"}]}, "spec: missing 'step'"),
        ({"class": [{"name": "a"}], "step": [{"seconds": 1, "rps": 1}]}, "missing 'key'"),
        ([], "spec: expected a table"),
    ],
)
def test_bad_specs_are_rejected_with_the_place(document, message):
    with pytest.raises(InvalidSpec, match=message):
        parse_spec(document)


def test_cli_like_arguments():
    workload, schedule = spec_from_args(
        rate=300, duration=20, key="demo-key-support-bot", texts=(2, 8), timeout_ms=500
    )
    assert schedule == Schedule((Step(20, 300),))
    assert workload.classes == (
        RequestClass("default", "demo-key-support-bot", texts=(2, 8), timeout_ms=500),
    )
    with pytest.raises(InvalidSpec, match="rate is a number of requests/s >= 0, not -1"):
        spec_from_args(rate=-1, duration=1, key="k")


def test_ranges_typed_on_a_command_line():
    assert parse_range("3") == (3, 3)
    assert parse_range("1-4") == (1, 4)
    with pytest.raises(InvalidSpec, match="LOW-HIGH"):
        parse_range("1..4")
