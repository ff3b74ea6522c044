"""OnnxBackend: padding layout, shapes, and the Backend protocol."""

from __future__ import annotations

import numpy as np
import pytest

from headway.models.backend import Backend, Encoded
from headway.worker.backends.onnx import OnnxBackend, pad_batch, sigmoid


def test_pad_batch_layout() -> None:
    batch = [Encoded(ids=(101, 7, 102)), Encoded(ids=(101, 102)), Encoded(ids=(101, 5, 6, 102))]
    feeds = pad_batch(batch)
    np.testing.assert_array_equal(
        feeds["input_ids"], [[101, 7, 102, 0], [101, 102, 0, 0], [101, 5, 6, 102]]
    )
    np.testing.assert_array_equal(
        feeds["attention_mask"], [[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]]
    )
    np.testing.assert_array_equal(feeds["token_type_ids"], np.zeros((3, 4)))
    assert all(v.dtype == np.int64 for v in feeds.values())


def test_pad_batch_type_ids_and_pad_id() -> None:
    batch = [Encoded(ids=(1, 2, 3), type_ids=(0, 1, 1)), Encoded(ids=(4,))]
    feeds = pad_batch(batch, pad_id=9)
    np.testing.assert_array_equal(feeds["input_ids"], [[1, 2, 3], [4, 9, 9]])
    np.testing.assert_array_equal(feeds["token_type_ids"], [[0, 1, 1], [0, 0, 0]])


def test_is_a_backend(default_backend: OnnxBackend) -> None:
    backend: Backend = default_backend
    assert (backend.kind, backend.dimensions) == ("embedding", 384)


def test_empty_batch(default_backend: OnnxBackend) -> None:
    out = default_backend.run([])
    assert out.shape == (0, 384)
    assert out.dtype == np.float32


def test_encode_texts_adds_special_tokens_and_no_padding(default_backend: OnnxBackend) -> None:
    short, longer = default_backend.encode_texts(["hi", "hello there, world"])
    assert short.ids[0] == 101 and short.ids[-1] == 102
    assert short.n_tokens == 3
    assert longer.n_tokens > short.n_tokens


def test_encode_pairs_marks_the_document_segment(default_backend: OnnxBackend) -> None:
    (pair,) = default_backend.encode_pairs("a query", ["the doc"])
    assert pair.type_ids is not None
    first_sep = pair.ids.index(102)
    assert set(pair.type_ids[: first_sep + 1]) == {0}
    assert set(pair.type_ids[first_sep + 1 :]) == {1}
    assert pair.ids[-1] == 102


def test_truncates_to_max_tokens(default_backend: OnnxBackend) -> None:
    (encoded,) = default_backend.encode_texts(["word " * 1000])
    (pair,) = default_backend.encode_pairs("query " * 300, ["doc " * 300])
    assert encoded.n_tokens == 256
    assert pair.n_tokens == 256
    assert pair.ids.count(102) == 2


def test_sigmoid_is_exact_and_never_overflows() -> None:
    logits = np.array([-1000.0, -20.0, -1.0, 0.0, 1.0, 20.0, 1000.0], dtype=np.float32)
    scores = sigmoid(logits)
    expected = 1.0 / (1.0 + np.exp(-logits.astype(np.float64).clip(-700, 700)))
    assert scores.dtype == np.float32
    np.testing.assert_allclose(scores, expected, rtol=1e-6, atol=1e-30)  # float32 underflow


def test_truncation_keeps_the_end_asked_for_or_refuses(default_backend: OnnxBackend) -> None:
    from headway.models.errors import InputRefused

    text = " ".join(f"w{i}" for i in range(300))
    whole = default_backend._tokenizer("none").encode(text).ids
    limit = 256
    right, left = (default_backend.encode_texts([text], side)[0].ids for side in ("right", "left"))
    assert len(right) == len(left) == limit
    assert right[1:-1] == tuple(whole[1 : limit - 1])  # [CLS] the start [SEP]
    assert left[1:-1] == tuple(whole[-(limit - 1) : -1])  # [CLS] the end [SEP]
    assert (right[0], right[-1]) == (left[0], left[-1]) == (whole[0], whole[-1])
    short = default_backend.encode_texts(["a short text"], "none")
    assert short == default_backend.encode_texts(["a short text"])
    over = len(whole) - limit
    with pytest.raises(InputRefused, match=rf"longest {len(whole)} tokens \({over} over\)"):
        default_backend.encode_texts(["short", text], "none")
