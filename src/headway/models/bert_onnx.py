"""Build an ONNX graph of a BERT encoder straight from its weights (no torch).

Opset 17; inputs ``input_ids``, ``attention_mask``, ``token_type_ids`` (int64
``[batch, sequence]``); linear weights stored ``[in, out]``, so each projection is a MatMul::

    x    = LayerNorm(word[input_ids] + position[0:sequence] + token_type[token_type_ids])
    bias = (1 - attention_mask) * finfo(float32).min        # [batch, 1, 1, sequence]
    repeat num_hidden_layers times (post-LN, as in BERT):
        q, k, v = x Wq + bq, x Wk + bk, x Wv + bv           # split into heads
        a = softmax(q k^T / sqrt(head_size) + bias) v        # scale folded into Wq, bq
        x = LayerNorm(x + a Wo + bo)
        x = LayerNorm(x + gelu(x W1 + b1) W2 + b2)          # exact erf GELU

The mask bias is transformers' own, so a masked key's softmax weight is exactly 0 and
padding never changes an unpadded row. Then one head: ``mean_pool_l2`` (sentence-
transformers mean pooling + Normalize) gives ``embeddings [batch, hidden]``,
``m = sum_t(x_t * mask_t) / max(sum_t(mask_t), 1e-9)``, then ``m / max(||m||_2, 1e-12)``;
``sequence_classification`` (``BertForSequenceClassification``) gives ``logits [batch,
num_labels]`` = ``tanh(x_0 Wp + bp) Wc + bc``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper, numpy_helper

from headway.models.errors import ModelImportError

Head = Literal["mean_pool_l2", "sequence_classification"]
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OPSET = 17

_F32 = npt.NDArray[np.float32]


def build_bert_graph(
    config: Mapping[str, Any], weights: Mapping[str, npt.NDArray[Any]], head: Head
) -> onnx.ModelProto:
    """The whole model as one ONNX graph; see the module docstring for its shape."""
    hidden_size = _config_int(config, "hidden_size")
    num_heads = _config_int(config, "num_attention_heads")
    num_layers = _config_int(config, "num_hidden_layers")
    eps = float(config.get("layer_norm_eps", 1e-12))
    if hidden_size % num_heads:
        raise ModelImportError(f"hidden_size {hidden_size} not divisible by {num_heads} heads")
    if config.get("hidden_act", "gelu") != "gelu":
        raise ModelImportError(f"unsupported hidden_act {config.get('hidden_act')!r}")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise ModelImportError("only absolute position embeddings are supported")

    g = _Graph(_Weights(weights))
    x = _embeddings(g, eps)
    bias = _mask_bias(g)
    for layer in range(num_layers):
        x = _encoder_layer(g, f"encoder.layer.{layer}.", x, bias, num_heads, hidden_size, eps)
    if head == "mean_pool_l2":
        output = _mean_pool_l2(g, x)
        g.output(output, "embeddings", ["batch", hidden_size])
    elif head == "sequence_classification":
        output, num_labels = _classifier(g, x)
        g.output(output, "logits", ["batch", num_labels])
    else:
        raise ModelImportError(f"unknown head {head!r}")
    return g.model()


def _config_int(config: Mapping[str, Any], key: str) -> int:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelImportError(f"config.json: {key!r} must be a positive integer, got {value!r}")
    return value


class _Weights:
    """Checkpoint tensors by their BertModel name, with or without the ``bert.`` prefix."""

    def __init__(self, tensors: Mapping[str, npt.NDArray[Any]]) -> None:
        self._tensors = tensors
        self._prefix = "bert." if "bert.embeddings.word_embeddings.weight" in tensors else ""

    def encoder(self, name: str) -> _F32:
        return self.top_level(self._prefix + name)

    def top_level(self, name: str) -> _F32:
        try:
            tensor = self._tensors[name]
        except KeyError:
            raise ModelImportError(f"checkpoint has no tensor {name!r}") from None
        return np.ascontiguousarray(tensor, dtype=np.float32)


class _Graph:
    """Accumulates nodes and initializers; every ``op`` returns its output's name."""

    def __init__(self, weights: _Weights) -> None:
        self.weights = weights
        self._nodes: list[onnx.NodeProto] = []
        self._initializers: list[onnx.TensorProto] = []
        self._outputs: list[onnx.ValueInfoProto] = []
        self._constants: set[str] = set()
        self._count = 0

    def op(self, op_type: str, inputs: list[str], **attrs: Any) -> str:
        self._count += 1
        name = f"{op_type.lower()}_{self._count}"
        self._nodes.append(helper.make_node(op_type, inputs, [name], name=name, **attrs))
        return name

    def init(self, name: str, value: npt.NDArray[Any]) -> str:
        self._initializers.append(numpy_helper.from_array(value, name))
        return name

    def scalar(self, name: str, value: float) -> str:
        """A float32 constant, created on first use and shared after."""
        return self._constant(name, np.array(value, dtype=np.float32))

    def ints(self, name: str, values: list[int]) -> str:
        """An int64 constant (axes, shapes), created on first use and shared after."""
        return self._constant(name, np.array(values, dtype=np.int64))

    def _constant(self, name: str, value: npt.NDArray[Any]) -> str:
        if name not in self._constants:
            self._constants.add(name)
            self.init(name, value)
        return name

    def output(self, name: str, exposed: str, shape: list[str | int]) -> None:
        self._nodes.append(helper.make_node("Identity", [name], [exposed], name=exposed))
        self._outputs.append(helper.make_tensor_value_info(exposed, TensorProto.FLOAT, shape))

    def model(self) -> onnx.ModelProto:
        inputs = [
            helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
            for n in INPUT_NAMES
        ]
        graph = helper.make_graph(
            self._nodes, "bert", inputs, self._outputs, initializer=self._initializers
        )
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="headway"
        )
        model.ir_version = 8  # opset 17's IR; newer IRs are refused by older runtimes
        onnx.checker.check_model(model)
        return model

    def linear(self, x: str, prefix: str, scale: float = 1.0) -> str:
        """``x W^T + b`` for a torch ``Linear`` at ``prefix``; ``scale`` is folded in."""
        weight = self.weights.encoder(prefix + "weight")
        bias = self.weights.encoder(prefix + "bias")
        w = self.init(prefix + "weight_t", np.ascontiguousarray(weight.T * np.float32(scale)))
        b = self.init(prefix + "bias", bias * np.float32(scale))
        return self.op("Add", [self.op("MatMul", [x, w]), b])

    def layer_norm(self, x: str, prefix: str, eps: float) -> str:
        scale = self.init(prefix + "weight", self.weights.encoder(prefix + "weight"))
        bias = self.init(prefix + "bias", self.weights.encoder(prefix + "bias"))
        return self.op("LayerNormalization", [x, scale, bias], axis=-1, epsilon=eps)


def _embeddings(g: _Graph, eps: float) -> str:
    w = g.weights
    word = g.init("word_embeddings", w.encoder("embeddings.word_embeddings.weight"))
    position = g.init("position_embeddings", w.encoder("embeddings.position_embeddings.weight"))
    token_type = g.init(
        "token_type_embeddings", w.encoder("embeddings.token_type_embeddings.weight")
    )
    sequence = g.op("Shape", ["input_ids"], start=1, end=2)
    positions = g.op("Slice", [position, g.ints("zero_1d", [0]), sequence, g.ints("axis_0", [0])])
    summed = g.op(
        "Add",
        [
            g.op("Add", [g.op("Gather", [word, "input_ids"]), positions]),
            g.op("Gather", [token_type, "token_type_ids"]),
        ],
    )
    return g.layer_norm(summed, "embeddings.LayerNorm.", eps)


def _mask_bias(g: _Graph) -> str:
    """``[batch, 1, 1, sequence]``: 0 where attended, finfo(float32).min where padded."""
    mask = g.op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    inverted = g.op("Sub", [g.scalar("one", 1.0), mask])
    bias = g.op("Mul", [inverted, g.scalar("mask_min", float(np.finfo(np.float32).min))])
    return g.op("Unsqueeze", [bias, g.ints("axes_1_2", [1, 2])])


def _encoder_layer(
    g: _Graph, prefix: str, x: str, bias: str, num_heads: int, hidden_size: int, eps: float
) -> str:
    head_size = hidden_size // num_heads
    split_heads = g.ints(f"{prefix}split_heads", [0, 0, num_heads, head_size])
    merge_heads = g.ints(f"{prefix}merge_heads", [0, 0, hidden_size])

    def heads(projected: str, perm: list[int]) -> str:
        return g.op("Transpose", [g.op("Reshape", [projected, split_heads])], perm=perm)

    attn = prefix + "attention."
    q = heads(g.linear(x, attn + "self.query.", 1.0 / math.sqrt(head_size)), [0, 2, 1, 3])
    k = heads(g.linear(x, attn + "self.key."), [0, 2, 3, 1])
    v = heads(g.linear(x, attn + "self.value."), [0, 2, 1, 3])
    scores = g.op("Add", [g.op("MatMul", [q, k]), bias])
    context = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v])
    merged = g.op("Reshape", [g.op("Transpose", [context], perm=[0, 2, 1, 3]), merge_heads])
    attended = g.layer_norm(
        g.op("Add", [g.linear(merged, attn + "output.dense."), x]), attn + "output.LayerNorm.", eps
    )
    intermediate = _gelu(g, g.linear(attended, prefix + "intermediate.dense."))
    output = g.op("Add", [g.linear(intermediate, prefix + "output.dense."), attended])
    return g.layer_norm(output, prefix + "output.LayerNorm.", eps)


def _gelu(g: _Graph, x: str) -> str:
    """``x * 0.5 * (1 + erf(x / sqrt 2))``, the pattern ONNX Runtime fuses into one Gelu."""
    erf = g.op("Erf", [g.op("Div", [x, g.scalar("sqrt_2", math.sqrt(2.0))])])
    one_plus_erf = g.op("Add", [erf, g.scalar("one", 1.0)])
    return g.op("Mul", [g.op("Mul", [x, one_plus_erf]), g.scalar("half", 0.5)])


def _mean_pool_l2(g: _Graph, x: str) -> str:
    mask_2d = g.op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    mask = g.op("Unsqueeze", [mask_2d, g.ints("axis_2", [2])])
    axis_1 = g.ints("axis_1", [1])
    summed = g.op("ReduceSum", [g.op("Mul", [x, mask]), axis_1], keepdims=0)
    count = g.op("ReduceSum", [mask, axis_1], keepdims=0)
    mean = g.op("Div", [summed, g.op("Max", [count, g.scalar("min_count", 1e-9)])])
    norm = g.op("Sqrt", [g.op("ReduceSumSquare", [mean], axes=[1], keepdims=1)])
    return g.op("Div", [mean, g.op("Max", [norm, g.scalar("min_norm", 1e-12)])])


def _classifier(g: _Graph, x: str) -> tuple[str, int]:
    first_token = g.op("Gather", [x, g.init("token_0", np.array(0, dtype=np.int64))], axis=1)
    pooled = g.op("Tanh", [g.linear(first_token, "pooler.dense.")])
    weight = g.weights.top_level("classifier.weight")
    w = g.init("classifier.weight_t", np.ascontiguousarray(weight.T))
    b = g.init("classifier.bias", g.weights.top_level("classifier.bias"))
    return g.op("Add", [g.op("MatMul", [pooled, w]), b]), int(weight.shape[0])
