"""The pieces every encoder graph is made of: checkpoint tensors, and a node accumulator.

Linear weights are stored ``[in, out]`` (a torch ``Linear`` keeps ``[out, in]``), so each
projection is one MatMul and one Add. Opset 17, IR 8: what older runtimes still load.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper, numpy_helper

from headway.models.errors import ModelImportError

OPSET = 17

F32 = npt.NDArray[np.float32]


class Weights:
    """Checkpoint tensors by their base model's name, with or without the prefix a task
    model (``BertForSequenceClassification``: ``bert.``) puts before them."""

    def __init__(self, tensors: Mapping[str, npt.NDArray[Any]], prefix: str, probe: str) -> None:
        """``probe``: a base-model tensor every checkpoint has, to tell whether ``prefix``
        is there."""
        self._tensors = tensors
        self._prefix = prefix if prefix + probe in tensors else ""

    def encoder(self, name: str) -> F32:
        return self.top_level(self._prefix + name)

    def top_level(self, name: str) -> F32:
        try:
            tensor = self._tensors[name]
        except KeyError:
            raise ModelImportError(f"checkpoint has no tensor {name!r}") from None
        return np.ascontiguousarray(tensor, dtype=np.float32)


class Graph:
    """Accumulates nodes and initializers; every ``op`` returns its output's name."""

    def __init__(self, weights: Weights, inputs: tuple[str, ...]) -> None:
        self.weights = weights
        self._inputs = inputs
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

    def int_scalar(self, name: str, value: int) -> str:
        """A 0-d int64 constant (a ``Range`` bound, a ``CumSum`` axis)."""
        return self._constant(name, np.array(value, dtype=np.int64))

    def _constant(self, name: str, value: npt.NDArray[Any]) -> str:
        if name not in self._constants:
            self._constants.add(name)
            self.init(name, value)
        return name

    def output(self, name: str, exposed: str, shape: list[str | int]) -> None:
        self._nodes.append(helper.make_node("Identity", [name], [exposed], name=exposed))
        self._outputs.append(helper.make_tensor_value_info(exposed, TensorProto.FLOAT, shape))

    def model(self, graph_name: str) -> onnx.ModelProto:
        inputs = [
            helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
            for n in self._inputs
        ]
        graph = helper.make_graph(
            self._nodes, graph_name, inputs, self._outputs, initializer=self._initializers
        )
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="headway"
        )
        model.ir_version = 8  # opset 17's IR; newer IRs are refused by older runtimes
        onnx.checker.check_model(model)
        return model

    def linear(self, x: str, prefix: str, scale: float = 1.0, *, top_level: bool = False) -> str:
        """``x W^T + b`` for a torch ``Linear`` at ``prefix`` (in the base model, or at the
        checkpoint's top level: a task head); ``scale`` is folded in."""
        tensor = self.weights.top_level if top_level else self.weights.encoder
        weight, bias = tensor(prefix + "weight"), tensor(prefix + "bias")
        w = self.init(prefix + "weight_t", np.ascontiguousarray(weight.T * np.float32(scale)))
        b = self.init(prefix + "bias", bias * np.float32(scale))
        return self.op("Add", [self.op("MatMul", [x, w]), b])

    def layer_norm(self, x: str, prefix: str, eps: float) -> str:
        scale = self.init(prefix + "weight", self.weights.encoder(prefix + "weight"))
        bias = self.init(prefix + "bias", self.weights.encoder(prefix + "bias"))
        return self.op("LayerNormalization", [x, scale, bias], axis=-1, epsilon=eps)


def config_int(config: Mapping[str, Any], key: str) -> int:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelImportError(f"config.json: {key!r} must be a positive integer, got {value!r}")
    return value
