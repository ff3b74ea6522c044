"""ONNX graphs of four encoder families, built straight from their weights (no torch).

Inputs ``input_ids``, ``attention_mask`` and, where the family has token types,
``token_type_ids`` (int64 ``[batch, sequence]``). Every family is a post-LN Transformer
encoder; they differ in their embeddings, their tensor names and their task head::

    x    = LayerNorm(word[input_ids] + position[p] (+ token_type[token_type_ids]))
    bias = (1 - attention_mask) * finfo(float32).min        # [batch, 1, 1, sequence]
    repeat num_layers times:
        q, k, v = x Wq + bq, x Wk + bk, x Wv + bv           # split into heads
        a = softmax(q k^T / sqrt(head_size) + bias (+ rel)) v   # scale folded into Wq, bq
        x = LayerNorm(x + a Wo + bo)
        x = LayerNorm(x + act(x W1 + b1) W2 + b2)

- **BERT** (``bert``): ``p = 0..sequence-1``; token types.
- **RoBERTa** (``roberta``, ``xlm-roberta``, ``camembert``): ``p = pad + cumsum(mask) *
  mask``, fairseq's positions (transformers counts non-pad ids; the same wherever the mask
  is 1, and padded cells are never attended); token types (one).
- **DistilBERT** (``distilbert``): ``p = 0..sequence-1``; no token types; eps 1e-12.
- **MPNet** (``mpnet``): RoBERTa's positions with pad 1, no token types, and ``rel``, a
  bias per head from the bucket of each key's offset from its query (T5's buckets: 32,
  up to 128 apart), shared by every layer.

The mask bias is transformers' own, so a masked key's softmax weight is exactly 0 and
padding never changes an unpadded row. Heads (``graphs.heads``) follow the last layer.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto

from headway.models.errors import ModelImportError
from headway.models.graphs.builder import Graph, Weights, config_int
from headway.models.graphs.heads import ClassifierStyle, Head, attach_head

TOKEN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
TEXT_INPUTS = ("input_ids", "attention_mask")
_MPNET_PAD = 1  # MPNetEmbeddings' padding_idx, whatever the config says
_REL_BUCKETS, _REL_MAX_DISTANCE = 32, 128


@dataclass(frozen=True, slots=True)
class Dims:
    """What the graph's shapes and constants come from, read from ``config.json``."""

    hidden: int
    heads: int
    layers: int
    eps: float
    activation: str
    positions: int
    pad: int


@dataclass(frozen=True, slots=True)
class LayerNames:
    """The tensor names of one encoder layer, after ``<layers>.<n>.``."""

    query: str
    key: str
    value: str
    attention_out: str
    attention_norm: str
    ffn_in: str
    ffn_out: str
    output_norm: str


@dataclass(frozen=True, slots=True)
class Family:
    """One architecture: how to read its config, its embeddings, its layers' names."""

    name: str
    model_types: tuple[str, ...]
    prefix: str
    """Where a task model keeps the base model's tensors (``roberta.``)."""
    inputs: tuple[str, ...]
    dims: Callable[[Mapping[str, Any]], Dims]
    embeddings: Callable[[Graph, Dims], str]
    layers: str
    names: LayerNames
    classifier: ClassifierStyle
    relative_bias: bool = False
    position_offset: int = 0
    """Positions an input cannot use (fairseq's: ``pad + 1``); max tokens is
    ``max_position_embeddings`` less these."""


_BERT_NAMES = LayerNames(
    query="attention.self.query.",
    key="attention.self.key.",
    value="attention.self.value.",
    attention_out="attention.output.dense.",
    attention_norm="attention.output.LayerNorm.",
    ffn_in="intermediate.dense.",
    ffn_out="output.dense.",
    output_norm="output.LayerNorm.",
)
_MPNET_NAMES = LayerNames(
    query="attention.attn.q.",
    key="attention.attn.k.",
    value="attention.attn.v.",
    attention_out="attention.attn.o.",
    attention_norm="attention.LayerNorm.",
    ffn_in="intermediate.dense.",
    ffn_out="output.dense.",
    output_norm="output.LayerNorm.",
)
_DISTILBERT_NAMES = LayerNames(
    query="attention.q_lin.",
    key="attention.k_lin.",
    value="attention.v_lin.",
    attention_out="attention.out_lin.",
    attention_norm="sa_layer_norm.",
    ffn_in="ffn.lin1.",
    ffn_out="ffn.lin2.",
    output_norm="output_layer_norm.",
)


def _bert_dims(config: Mapping[str, Any]) -> Dims:
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise ModelImportError("only absolute position embeddings are supported")
    return Dims(
        hidden=config_int(config, "hidden_size"),
        heads=config_int(config, "num_attention_heads"),
        layers=config_int(config, "num_hidden_layers"),
        eps=float(config.get("layer_norm_eps", 1e-12)),
        activation=str(config.get("hidden_act", "gelu")),
        positions=int(config.get("max_position_embeddings", 512)),
        pad=int(config.get("pad_token_id") or 0),
    )


def _mpnet_dims(config: Mapping[str, Any]) -> Dims:
    buckets = config.get("relative_attention_num_buckets", _REL_BUCKETS)
    if buckets != _REL_BUCKETS:  # MPNetEncoder computes 32 buckets whatever it has
        raise ModelImportError(f"relative_attention_num_buckets {buckets} is not 32")
    return dataclasses.replace(_bert_dims(config), pad=_MPNET_PAD)


def _distilbert_dims(config: Mapping[str, Any]) -> Dims:
    return Dims(
        hidden=config_int(config, "dim"),
        heads=config_int(config, "n_heads"),
        layers=config_int(config, "n_layers"),
        eps=1e-12,  # DistilBERT's LayerNorms ignore the config
        activation=str(config.get("activation", "gelu")),
        positions=int(config.get("max_position_embeddings", 512)),
        pad=int(config.get("pad_token_id") or 0),
    )


def _embeddings(g: Graph, dims: Dims, *, token_types: bool, fairseq: bool) -> str:
    """``fairseq``: positions from ``pad + 1`` along each row's real tokens (``pad`` on
    padding); else ``0..sequence-1``."""
    w = g.weights
    word = g.init("word_embeddings", w.encoder("embeddings.word_embeddings.weight"))
    position = g.init("position_embeddings", w.encoder("embeddings.position_embeddings.weight"))
    if token_types:
        token_type = g.init(
            "token_type_embeddings", w.encoder("embeddings.token_type_embeddings.weight")
        )
    if fairseq:
        counted = g.op("CumSum", ["attention_mask", g.int_scalar("axis_1_scalar", 1)])
        real = g.op("Mul", [counted, "attention_mask"])
        ids = g.op("Add", [real, g.ints("pad_id", [dims.pad])])
        positions = g.op("Gather", [position, ids])
    else:
        sequence = g.op("Shape", ["input_ids"], start=1, end=2)
        origin, axis = g.ints("zero_1d", [0]), g.ints("axis_0", [0])
        positions = g.op("Slice", [position, origin, sequence, axis])
    summed = g.op("Add", [g.op("Gather", [word, "input_ids"]), positions])
    if token_types:
        summed = g.op("Add", [summed, g.op("Gather", [token_type, "token_type_ids"])])
    return g.layer_norm(summed, "embeddings.LayerNorm.", eps=dims.eps)


_bert_embeddings = functools.partial(_embeddings, token_types=True, fairseq=False)
_distilbert_embeddings = functools.partial(_embeddings, token_types=False, fairseq=False)
_roberta_embeddings = functools.partial(_embeddings, token_types=True, fairseq=True)
_mpnet_embeddings = functools.partial(_embeddings, token_types=False, fairseq=True)


FAMILIES: tuple[Family, ...] = (
    Family(
        name="BERT",
        model_types=("bert",),
        prefix="bert.",
        inputs=TOKEN_INPUTS,
        dims=_bert_dims,
        embeddings=_bert_embeddings,
        layers="encoder.layer.",
        names=_BERT_NAMES,
        classifier="pooler",
    ),
    Family(
        name="RoBERTa",
        model_types=("roberta", "xlm-roberta", "camembert"),
        prefix="roberta.",
        inputs=TOKEN_INPUTS,
        dims=_bert_dims,
        embeddings=_roberta_embeddings,
        layers="encoder.layer.",
        names=_BERT_NAMES,
        classifier="dense_out_proj",
        position_offset=2,
    ),
    Family(
        name="DistilBERT",
        model_types=("distilbert",),
        prefix="distilbert.",
        inputs=TEXT_INPUTS,
        dims=_distilbert_dims,
        embeddings=_distilbert_embeddings,
        layers="transformer.layer.",
        names=_DISTILBERT_NAMES,
        classifier="pre_classifier",
    ),
    Family(
        name="MPNet",
        model_types=("mpnet",),
        prefix="mpnet.",
        inputs=TEXT_INPUTS,
        dims=_mpnet_dims,
        embeddings=_mpnet_embeddings,
        layers="encoder.layer.",
        names=_MPNET_NAMES,
        classifier="dense_out_proj",
        relative_bias=True,
        position_offset=_MPNET_PAD + 1,
    ),
)
_BY_MODEL_TYPE = {model_type: f for f in FAMILIES for model_type in f.model_types}
SUPPORTED_MODEL_TYPES = tuple(sorted(_BY_MODEL_TYPE))


def find_family(config: Mapping[str, Any]) -> Family | None:
    """The family of ``config.json``'s ``model_type``; None: not one built here."""
    return _BY_MODEL_TYPE.get(str(config.get("model_type")))


def family_of(config: Mapping[str, Any]) -> Family:
    """The family of ``config.json``'s ``model_type``, or an error naming those supported."""
    family = find_family(config)
    if family is None:
        model_type = config.get("model_type")
        raise ModelImportError(
            f"model_type {model_type!r} is not one headway builds a graph for "
            f"({', '.join(SUPPORTED_MODEL_TYPES)}); export it to ONNX instead "
            f"(optimum-cli export onnx --model DIR --task feature-extraction DIR/onnx) and "
            f"import that with --onnx"
        )
    return family


def build_graph(
    config: Mapping[str, Any], weights: Mapping[str, npt.NDArray[Any]], head: Head
) -> onnx.ModelProto:
    """The whole model as one ONNX graph; see the module docstring for its shape."""
    family = family_of(config)
    dims = family.dims(config)
    if dims.hidden % dims.heads:
        raise ModelImportError(f"hidden size {dims.hidden} not divisible by {dims.heads} heads")
    activation = _ACTIVATIONS.get(dims.activation)
    if activation is None:
        raise ModelImportError(
            f"unsupported activation {dims.activation!r} (supported: {', '.join(_ACTIVATIONS)})"
        )
    g = Graph(Weights(weights, family.prefix, "embeddings.word_embeddings.weight"), family.inputs)
    x = family.embeddings(g, dims)
    bias = _mask_bias(g)
    if family.relative_bias:
        bias = g.op("Add", [bias, _relative_bias(g, dims)])
    for layer in range(dims.layers):
        x = _encoder_layer(g, f"{family.layers}{layer}.", family.names, x, bias, dims, activation)
    attach_head(g, x, head, dims.hidden, family.classifier)
    return g.model(family.model_types[0].replace("-", "_"))


def max_positions(family: Family, config: Mapping[str, Any]) -> int:
    """The most tokens an input may have: position embeddings less those never used."""
    return int(config.get("max_position_embeddings", 512)) - family.position_offset


def _mask_bias(g: Graph) -> str:
    """``[batch, 1, 1, sequence]``: 0 where attended, finfo(float32).min where padded."""
    mask = g.op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    inverted = g.op("Sub", [g.scalar("one", 1.0), mask])
    bias = g.op("Mul", [inverted, g.scalar("mask_min", float(np.finfo(np.float32).min))])
    return g.op("Unsqueeze", [bias, g.ints("axes_1_2", [1, 2])])


def relative_buckets(positions: int) -> npt.NDArray[np.int64]:
    """The bucket of each offset ``key - query`` from ``-(positions-1)`` to ``positions-1``,
    as MPNet computes it (``MPNetEncoder.relative_position_bucket``, float32 throughout)."""
    relative = np.arange(-(positions - 1), positions, dtype=np.int64)
    n = -relative
    half = _REL_BUCKETS // 2
    bucket = (n < 0).astype(np.int64) * half
    n = np.abs(n)
    exact = half // 2
    distance = np.maximum(n, 1).astype(np.float32)  # 0 is an exact bucket: never logged
    scaled = np.log(distance / np.float32(exact)) / np.float32(math.log(_REL_MAX_DISTANCE / exact))
    large = exact + (scaled * np.float32(half - exact)).astype(np.int64)
    large = np.minimum(large, half - 1)
    return bucket + np.where(n < exact, n, large)


def _relative_bias(g: Graph, dims: Dims) -> str:
    """``[1, heads, sequence, sequence]``: the learned bias of each (query, key) offset."""
    table = g.init("relative_buckets", relative_buckets(dims.positions))
    weight = g.init(
        "relative_attention_bias", g.weights.encoder("encoder.relative_attention_bias.weight")
    )
    sequence = g.op("Squeeze", [g.op("Shape", ["input_ids"], start=1, end=2)])
    steps = g.op("Range", [g.int_scalar("zero", 0), sequence, g.int_scalar("one_step", 1)])
    offsets = g.op(
        "Sub",
        [
            g.op("Unsqueeze", [steps, g.ints("axis_0", [0])]),
            g.op("Unsqueeze", [steps, g.ints("axis_1", [1])]),
        ],
    )
    index = g.op("Add", [offsets, g.ints("offset_origin", [dims.positions - 1])])
    per_head = g.op("Gather", [weight, g.op("Gather", [table, index])])  # [q, k, heads]
    return g.op("Unsqueeze", [g.op("Transpose", [per_head], perm=[2, 0, 1]), g.ints("axis_0", [0])])


def _encoder_layer(
    g: Graph,
    prefix: str,
    names: LayerNames,
    x: str,
    bias: str,
    dims: Dims,
    activation: Callable[[Graph, str], str],
) -> str:
    head_size = dims.hidden // dims.heads
    split_heads = g.ints(f"{prefix}split_heads", [0, 0, dims.heads, head_size])
    merge_heads = g.ints(f"{prefix}merge_heads", [0, 0, dims.hidden])

    def heads(projected: str, perm: list[int]) -> str:
        return g.op("Transpose", [g.op("Reshape", [projected, split_heads])], perm=perm)

    q = heads(g.linear(x, prefix + names.query, 1.0 / math.sqrt(head_size)), [0, 2, 1, 3])
    k = heads(g.linear(x, prefix + names.key), [0, 2, 3, 1])
    v = heads(g.linear(x, prefix + names.value), [0, 2, 1, 3])
    scores = g.op("Add", [g.op("MatMul", [q, k]), bias])
    context = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v])
    merged = g.op("Reshape", [g.op("Transpose", [context], perm=[0, 2, 1, 3]), merge_heads])
    attended = g.layer_norm(
        g.op("Add", [g.linear(merged, prefix + names.attention_out), x]),
        prefix + names.attention_norm,
        dims.eps,
    )
    intermediate = activation(g, g.linear(attended, prefix + names.ffn_in))
    output = g.op("Add", [g.linear(intermediate, prefix + names.ffn_out), attended])
    return g.layer_norm(output, prefix + names.output_norm, dims.eps)


def _gelu(g: Graph, x: str) -> str:
    """``x * 0.5 * (1 + erf(x / sqrt 2))``, the pattern ONNX Runtime fuses into one Gelu."""
    erf = g.op("Erf", [g.op("Div", [x, g.scalar("sqrt_2", math.sqrt(2.0))])])
    one_plus_erf = g.op("Add", [erf, g.scalar("one", 1.0)])
    return g.op("Mul", [g.op("Mul", [x, one_plus_erf]), g.scalar("half", 0.5)])


def _gelu_tanh(g: Graph, x: str) -> str:
    """``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`` (``gelu_new``)."""
    cubed = g.op("Mul", [g.op("Mul", [x, x]), x])
    inner = g.op("Add", [x, g.op("Mul", [cubed, g.scalar("gelu_cubic", 0.044715)])])
    scaled = g.op("Mul", [inner, g.scalar("sqrt_2_over_pi", math.sqrt(2.0 / math.pi))])
    one_plus_tanh = g.op("Add", [g.op("Tanh", [scaled]), g.scalar("one", 1.0)])
    return g.op("Mul", [g.op("Mul", [x, one_plus_tanh]), g.scalar("half", 0.5)])


def _relu(g: Graph, x: str) -> str:
    return g.op("Relu", [x])


_ACTIVATIONS: dict[str, Callable[[Graph, str], str]] = {
    "gelu": _gelu,
    "gelu_new": _gelu_tanh,
    "gelu_pytorch_tanh": _gelu_tanh,
    "relu": _relu,
}
