"""The real backend: a stored artifact run on ONNX Runtime's CPU provider.

``run`` pads a batch to its longest member, never further (a batch costs ``n × longest``,
hence the batcher groups texts of similar length), with no Python loop per row: the mask
``arange(longest) < lengths[:, None]`` scatters the concatenated ids into an ``[n,
longest]`` array (its true cells, row-major, are in the ids' order). Only the inputs the
graph declares are fed. Token embeddings are pooled and L2-normalised here as the manifest
says, as sentence-transformers' ``Pooling`` and ``Normalize`` do. The session runs over
the artifact's prepared copy (``models/prepared.py``), so processes share its weights.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from tokenizers import Encoding, Tokenizer

from headway.models.backend import Encoded, ModelKind
from headway.models.errors import InputRefused, ModelPreparationError
from headway.models.manifest import ModelManifest
from headway.models.prepared import ensure_prepared
from headway.models.store import StoredModel
from headway.models.tokenizer import configure, load_tokenizer
from headway.wire import Token, Truncation

log = logging.getLogger(__name__)

_PAD_TOKENS = ("[PAD]", "<pad>")  # WordPiece's, then BPE and SentencePiece vocabularies'
CALL_OVERHEAD_TOKENS = 8


class OnnxBackend:
    """A loaded artifact; ``run`` is called from one thread only."""

    def __init__(
        self, session: ort.InferenceSession, tokenizer: Tokenizer, manifest: ModelManifest
    ) -> None:
        self._session = session
        self._tokenizers: dict[Truncation, Tokenizer] = {"right": tokenizer}
        """The artifact's (truncating at the end), and the others made when first asked."""
        self._manifest = manifest
        self._output_name: str = session.get_outputs()[0].name
        self._inputs = frozenset(i.name for i in session.get_inputs())
        pad_ids = (tokenizer.token_to_id(token) for token in _PAD_TOKENS)
        self._pad_id = next((i for i in pad_ids if i is not None), 0)

    @classmethod
    def load(
        cls, model: StoredModel, *, intra_op_threads: int = 1, mapped_weights: bool = True
    ) -> OnnxBackend:
        """A session over the artifact's prepared copy (``models.prepared``: weights mapped,
        shared by every process holding the version), or over the artifact itself when
        ``mapped_weights`` is off or the copy cannot be made."""
        options = ort.SessionOptions()
        options.intra_op_num_threads = intra_op_threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        graph = _mapped_graph(model) if mapped_weights else model.onnx_path
        session = ort.InferenceSession(
            str(graph), sess_options=options, providers=["CPUExecutionProvider"]
        )
        tokenizer = load_tokenizer(model.tokenizer_path, model.manifest.max_tokens)
        return cls(session, tokenizer, model.manifest)

    @property
    def kind(self) -> ModelKind:
        return self._manifest.kind

    @property
    def dimensions(self) -> int:
        return self._manifest.dimensions

    @property
    def call_overhead_tokens(self) -> int:
        """A call's fixed cost as padded tokens' worth (the ratio of this CPU model's fixed
        cost per call to its cost per padded token: docs/benchmarks.md, "Figures the
        design rests on")."""
        return CALL_OVERHEAD_TOKENS

    def encode_texts(self, texts: Sequence[str], truncation: Truncation = "right") -> list[Encoded]:
        """Ids with ``[CLS]``/``[SEP]``; type ids are all 0 for one text, so left as None."""
        encodings = self._tokenizer(truncation).encode_batch_fast(list(texts))
        if truncation == "none":
            self._within_limit(encodings)
        return [Encoded(ids=tuple(e.ids)) for e in encodings]

    def encode_pairs(
        self, query: str, documents: Sequence[str], truncation: Truncation = "right"
    ) -> list[Encoded]:
        """``[CLS] query [SEP] doc [SEP]``, truncated longest-first, as CrossEncoder does."""
        pairs = [(query, d) for d in documents]
        encodings = self._tokenizer(truncation).encode_batch_fast(pairs)
        if truncation == "none":
            self._within_limit(encodings)
        return [_pair(e) for e in encodings]

    def tokens(self, texts: Sequence[str], add_special_tokens: bool) -> list[list[Token]]:
        encodings = self._tokenizer("none").encode_batch(
            list(texts), add_special_tokens=add_special_tokens
        )
        return [_tokens(text, e) for text, e in zip(texts, encodings, strict=True)]

    def decode(self, ids: Sequence[Sequence[int]], skip_special_tokens: bool) -> list[str]:
        vocabulary = self._tokenizers["right"].get_vocab_size(with_added_tokens=True)
        if any(not 0 <= i < vocabulary for row in ids for i in row):
            raise InputRefused(f"token ids must be from 0 to {vocabulary - 1}")
        return list(
            self._tokenizers["right"].decode_batch(
                [list(row) for row in ids], skip_special_tokens=skip_special_tokens
            )
        )

    def _tokenizer(self, truncation: Truncation) -> Tokenizer:
        tokenizer = self._tokenizers.get(truncation)
        if tokenizer is None:
            copy = Tokenizer.from_str(self._tokenizers["right"].to_str())
            tokenizer = self._tokenizers[truncation] = configure(
                copy, self._manifest.max_tokens, truncation
            )
        return tokenizer

    def _within_limit(self, encodings: Sequence[Encoding]) -> None:
        """Untruncated encodings may be over the limit: refuse the longest that is."""
        limit = self._manifest.max_tokens
        longest = max((len(e.ids) for e in encodings), default=0)
        if longest > limit:
            over = sum(len(e.ids) > limit for e in encodings)
            raise InputRefused(
                f"{over} input(s) over the model's limit of {limit} tokens, the longest "
                f"{longest} tokens ({longest - limit} over), and truncation is off"
            )

    def run(self, batch: Sequence[Encoded]) -> npt.NDArray[np.float32]:
        if not batch:
            width = (0, self.dimensions) if self.kind == "embedding" else (0,)
            return np.empty(width, dtype=np.float32)
        feeds = pad_batch(batch, self._pad_id)
        declared = {name: value for name, value in feeds.items() if name in self._inputs}
        (output,) = self._session.run([self._output_name], declared)
        if self.kind == "cross-encoder":
            return sigmoid(np.asarray(output[:, 0], dtype=np.float32))
        rows = pool(np.asarray(output, dtype=np.float32), feeds["attention_mask"], self._manifest)
        return np.ascontiguousarray(l2_normalize(rows) if self._manifest.normalize else rows)


def _mapped_graph(model: StoredModel) -> Path:
    try:
        return ensure_prepared(model)
    except (OSError, ModelPreparationError) as exc:
        log.warning(
            "no mapped copy of %s (%s); loading the artifact onto the heap", model.version, exc
        )
        return model.onnx_path


def pool(
    output: npt.NDArray[np.float32], mask: npt.NDArray[np.int64], manifest: ModelManifest
) -> npt.NDArray[np.float32]:
    """One row per text: the output itself, its first or last real token, or its mean over
    real tokens."""
    if manifest.pooling == "none":
        return output
    if manifest.pooling == "cls":
        return output[:, 0, :]
    if manifest.pooling == "last":
        last = mask.sum(axis=1) - 1  # padded on the right
        return output[np.arange(output.shape[0]), last, :]
    weights = mask[:, :, None].astype(np.float32)
    counts = np.maximum(weights.sum(axis=1), 1e-9)  # sentence-transformers' clamp
    means: npt.NDArray[np.float32] = ((output * weights).sum(axis=1) / counts).astype(np.float32)
    return means


def l2_normalize(rows: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Rows over their norm, never divided by less than 1e-12 (torch's ``F.normalize``)."""
    norms = np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
    unit: npt.NDArray[np.float32] = (rows / norms).astype(np.float32, copy=False)
    return unit


def sigmoid(logits: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """``1 / (1 + e^-x)`` without overflow: ``exp`` only ever sees ``-|x|``."""
    decay = np.exp(-np.abs(logits))
    scores = np.where(logits >= 0, 1.0 / (1.0 + decay), decay / (1.0 + decay))
    return scores.astype(np.float32, copy=False)


def pad_batch(batch: Sequence[Encoded], pad_id: int = 0) -> dict[str, npt.NDArray[np.int64]]:
    """The three int64 ``[n, longest]`` model inputs for one batch."""
    lengths = np.fromiter((len(e.ids) for e in batch), dtype=np.int64, count=len(batch))
    total = int(lengths.sum())
    mask = np.arange(int(lengths.max())) < lengths[:, None]
    input_ids = np.full(mask.shape, pad_id, dtype=np.int64)
    input_ids[mask] = np.fromiter(
        itertools.chain.from_iterable(e.ids for e in batch), dtype=np.int64, count=total
    )
    token_type_ids = np.zeros(mask.shape, dtype=np.int64)
    if any(e.type_ids is not None for e in batch):
        token_type_ids[mask] = np.fromiter(
            itertools.chain.from_iterable(_type_ids(e) for e in batch), dtype=np.int64, count=total
        )
    return {
        "input_ids": input_ids,
        "attention_mask": mask.astype(np.int64),
        "token_type_ids": token_type_ids,
    }


def _tokens(text: str, encoding: Encoding) -> list[Token]:
    """TEI's tokens: a special token has its own form and no span in the text."""
    return [
        Token(i, token, True, None, None)
        if special
        else Token(i, text[start:stop], False, start, stop)
        for i, token, special, (start, stop) in zip(
            encoding.ids,
            encoding.tokens,
            encoding.special_tokens_mask,
            encoding.offsets,
            strict=True,
        )
    ]


def _type_ids(encoded: Encoded) -> Sequence[int]:
    return encoded.type_ids if encoded.type_ids is not None else (0,) * len(encoded.ids)


def _pair(encoding: Encoding) -> Encoded:
    return Encoded(ids=tuple(encoding.ids), type_ids=tuple(encoding.type_ids))
