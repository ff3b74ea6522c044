"""The tokenizer an artifact ships, fixed for dynamic batching.

Checkpoints often save ``tokenizer.json`` with padding to a fixed length (the
MiniLM one pads every input to 128 tokens), which makes every batch as long as
the longest possible input and erases the gain from batching. An artifact's
tokenizer has padding off (the backend pads each batch to its longest member)
and truncates to the model's ``max_tokens`` with the longest-first strategy,
exactly as sentence-transformers calls it, so token ids match its own.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, normalizers

from headway.models.errors import ModelImportError
from headway.wire import Truncation


def configure(tokenizer: Tokenizer, max_tokens: int, truncation: Truncation = "right") -> Tokenizer:
    """No padding; truncate (longest first, from ``truncation``'s side) to ``max_tokens``."""
    tokenizer.no_padding()
    if truncation == "none":
        tokenizer.no_truncation()
    else:
        tokenizer.enable_truncation(
            max_length=max_tokens, stride=0, strategy="longest_first", direction=truncation
        )
    return tokenizer


def load_tokenizer(path: Path, max_tokens: int) -> Tokenizer:
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # the Rust side raises plain Exception
        raise ModelImportError(f"cannot load tokenizer {path}: {exc}") from exc
    return configure(tokenizer, max_tokens)


def prepare_tokenizer_json(
    src: Path, dst: Path, max_tokens: int, *, lowercase: bool = False
) -> None:
    """Write ``src`` to ``dst`` with padding off and truncation at ``max_tokens``;
    ``lowercase``: with a ``Lowercase`` normalizer first unless it has one (what
    sentence-transformers does for ``do_lower_case``)."""
    tokenizer = load_tokenizer(src, max_tokens)
    if lowercase and not _lowercases(tokenizer.normalizer):
        current = tokenizer.normalizer
        rest = _parts(current) if isinstance(current, normalizers.Sequence) else [current]
        tokenizer.normalizer = normalizers.Sequence(
            [normalizers.Lowercase(), *(n for n in rest if n is not None)]
        )
    dst.write_text(tokenizer.to_str(pretty=True), encoding="utf-8")


def _lowercases(normalizer: object) -> bool:
    if isinstance(normalizer, normalizers.Lowercase):
        return True
    if isinstance(normalizer, normalizers.Sequence):
        return any(isinstance(n, normalizers.Lowercase) for n in _parts(normalizer))
    return False


def _parts(sequence: normalizers.Sequence) -> list[normalizers.Normalizer]:
    """A ``Sequence``'s normalizers, by index (its type stubs do not let it iterate)."""
    return [sequence[i] for i in range(len(sequence))]
