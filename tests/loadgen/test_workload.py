import json
from collections import Counter

import pytest

from headway_tools.loadgen.corpus import WORDS
from headway_tools.loadgen.errors import InvalidSpec
from headway_tools.loadgen.workload import RequestClass, Workload


def decoded(workload: Workload, count: int) -> list[tuple[int, dict]]:
    return [(p.class_index, json.loads(p.body)) for p in workload.prepare(count)]


def test_classes_are_drawn_by_weight():
    workload = Workload(
        (RequestClass("interactive", "a", weight=3), RequestClass("batch", "b", weight=1)), seed=5
    )
    picks = Counter(p.class_index for p in workload.prepare(20_000))
    assert picks[0] / 20_000 == pytest.approx(0.75, abs=0.02)
    assert picks[1] + picks[0] == 20_000


def test_the_same_seed_gives_the_same_bytes_and_another_seed_others():
    classes = (RequestClass("a", "k", texts=(1, 4)), RequestClass("b", "k2"))
    first = [p.body for p in Workload(classes, seed=1).prepare(200)]
    assert first == [p.body for p in Workload(classes, seed=1).prepare(200)]
    assert first != [p.body for p in Workload(classes, seed=2).prepare(200)]


def test_bodies_follow_each_class_ranges_and_model():
    classes = (
        RequestClass("small", "k1", model="m1", texts=(1, 1), words=(5, 5)),
        RequestClass("large", "k2", model="m2", texts=(3, 6), words=(10, 20)),
    )
    requests = list(Workload(classes).prepare(2000))
    for prepared in requests:
        body = json.loads(prepared.body)
        cls = classes[prepared.class_index]
        assert body["model"] == cls.model
        assert len(body["input"]) == prepared.texts
        assert cls.texts[0] <= prepared.texts <= cls.texts[1]
        for text in body["input"]:
            words = text.split()
            assert cls.words[0] <= len(words) <= cls.words[1]
            assert set(words) <= set(WORDS)
    assert {p.texts for p in requests if p.class_index == 1} == {3, 4, 5, 6}


def test_no_text_repeats_in_a_run_even_with_one_word_texts():
    workload = Workload((RequestClass("tiny", "k", texts=(1, 3), words=(1, 1)),))
    texts = [t for _, body in decoded(workload, 5000) for t in body["input"]]
    assert len(texts) == len(set(texts))
    # 15,000 texts need two words each to stay distinct over a 330-word list.
    assert workload.serial_words(5000) == 2
    assert {len(t.split()) for t in texts} == {2}


def test_headers_carry_the_key_and_the_deadline():
    cls = RequestClass("a", "demo-key-search-app", timeout_ms=250)
    assert dict(cls.headers()) == {
        "Authorization": "Bearer demo-key-search-app",
        "Content-Type": "application/json",
        "X-Timeout-Ms": "250",
    }
    assert cls.deadline_s == 0.25


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"weight": 0}, "weight"),
        ({"texts": (3, 1)}, "texts"),
        ({"words": (0, 4)}, "words"),
        ({"timeout_ms": 0}, "timeout_ms"),
        ({"key": ""}, "key"),
        ({"name": ""}, "name"),
    ],
)
def test_bad_classes_are_rejected(changes, message):
    fields = {"name": "a", "key": "k", **changes}
    with pytest.raises(InvalidSpec, match=message):
        RequestClass(**fields)


def test_a_workload_needs_distinct_classes():
    with pytest.raises(InvalidSpec, match="at least one"):
        Workload(())
    with pytest.raises(InvalidSpec, match="unique"):
        Workload((RequestClass("a", "k"), RequestClass("a", "k2")))
