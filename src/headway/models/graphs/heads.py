"""What follows an encoder's last layer: pooling to one row per text, or a classifier.

``Pooled`` is sentence-transformers' ``Pooling`` (and ``Normalize``) in the graph, giving
``embeddings [batch, hidden]``:

- ``mean``: ``sum_t(x_t * mask_t) / max(sum_t(mask_t), 1e-9)``;
- ``cls``: ``x_0``;
- ``last``: the last real token, ``x_(sum_t(mask_t) - 1)`` (inputs are padded on the right);

then, when ``normalize``, ``m / max(||m||_2, 1e-12)``. ``Classified`` is the family's
sequence-classification head on ``x_0``, giving ``logits [batch, num_labels]``:

- ``pooler`` (BERT): ``tanh(x_0 Wp + bp) Wc + bc``, the pooler inside the base model;
- ``dense_out_proj`` (RoBERTa, MPNet): ``tanh(x_0 Wd + bd) Wo + bo``;
- ``pre_classifier`` (DistilBERT): ``relu(x_0 Wp + bp) Wc + bc``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from onnx import TensorProto

from headway.models.errors import ModelImportError
from headway.models.graphs.builder import Graph

PoolingMode = Literal["mean", "cls", "last"]
ClassifierStyle = Literal["pooler", "dense_out_proj", "pre_classifier"]


@dataclass(frozen=True, slots=True)
class Pooled:
    pooling: PoolingMode
    normalize: bool


@dataclass(frozen=True, slots=True)
class Classified:
    """The family's own sequence-classification head (its ``ClassifierStyle``)."""


Head = Pooled | Classified


def attach_head(g: Graph, x: str, head: Head, hidden: int, style: ClassifierStyle) -> None:
    if isinstance(head, Pooled):
        pooled = _POOLINGS[head.pooling](g, x)
        output = _l2_normalize(g, pooled) if head.normalize else pooled
        g.output(output, "embeddings", ["batch", hidden])
    else:
        logits, num_labels = _classifier(g, x, style)
        g.output(logits, "logits", ["batch", num_labels])


def _mean(g: Graph, x: str) -> str:
    mask_2d = g.op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    mask = g.op("Unsqueeze", [mask_2d, g.ints("axis_2", [2])])
    axis_1 = g.ints("axis_1", [1])
    summed = g.op("ReduceSum", [g.op("Mul", [x, mask]), axis_1], keepdims=0)
    count = g.op("ReduceSum", [mask, axis_1], keepdims=0)
    return g.op("Div", [summed, g.op("Max", [count, g.scalar("min_count", 1e-9)])])


def _first(g: Graph, x: str) -> str:
    return g.op("Gather", [x, g.init("token_0", np.array(0, dtype=np.int64))], axis=1)


def _last(g: Graph, x: str) -> str:
    lengths = g.op("ReduceSum", ["attention_mask", g.ints("axis_1", [1])], keepdims=1)
    last = g.op("Sub", [lengths, g.ints("one_1d", [1])])  # [batch, 1]
    index = g.op("Unsqueeze", [last, g.ints("axis_2", [2])])  # [batch, 1, 1]
    width = g.op("Shape", [x], start=2, end=3)
    shape = g.op("Concat", [g.ints("ones_2", [1, 1]), width], axis=0)
    rows = g.op("GatherElements", [x, g.op("Expand", [index, shape])], axis=1)
    return g.op("Squeeze", [rows, g.ints("axis_1", [1])])


_POOLINGS = {"mean": _mean, "cls": _first, "last": _last}


def _l2_normalize(g: Graph, rows: str) -> str:
    norm = g.op("Sqrt", [g.op("ReduceSumSquare", [rows], axes=[1], keepdims=1)])
    return g.op("Div", [rows, g.op("Max", [norm, g.scalar("min_norm", 1e-12)])])


def _classifier(g: Graph, x: str, style: ClassifierStyle) -> tuple[str, int]:
    first = _first(g, x)
    if style == "pooler":
        hidden = g.op("Tanh", [g.linear(first, "pooler.dense.")])
        out = "classifier."
    elif style == "dense_out_proj":
        hidden = g.op("Tanh", [g.linear(first, "classifier.dense.", top_level=True)])
        out = "classifier.out_proj."
    elif style == "pre_classifier":
        hidden = g.op("Relu", [g.linear(first, "pre_classifier.", top_level=True)])
        out = "classifier."
    else:
        raise ModelImportError(f"unknown classifier head {style!r}")
    num_labels = int(g.weights.top_level(out + "weight").shape[0])
    return g.linear(hidden, out, top_level=True), num_labels
