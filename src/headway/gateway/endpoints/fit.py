"""Whether the resolved model can give what a request asks of its shape (pure).

A narrower width (OpenAI's and TEI's ``dimensions``, Cohere's ``output_dimension``) or a token
limit (Cohere's ``max_tokens``, ``max_tokens_per_doc``) depends on the model, so it is checked
once the version is resolved (``ModelRequest.check``), the same way whatever the protocol.

- **Width.** A prefix of a vector, L2-normalised again, is an embedding only for a model trained
  for it (Matryoshka representation learning). A request may ask for one of the widths the model
  declares (``ModelRecord.matryoshka_dimensions``, from its manifest) or its own; any other is
  refused (422) with the widths that exist: truncating another model would answer with vectors
  that look fine and search badly, which is worse than an error.
- **Token limit.** The worker truncates each text at the model's own limit
  (``ModelRecord.max_tokens``) and the gateway has no tokenizer to cut it shorter, so a limit
  below the model's is refused, naming the model's; one at or above it is what happens anyway. A
  model registered before its limit was recorded (``max_tokens`` 0) accepts any.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from headway.errors import ValidationFailed
from headway.registry.model import ModelRecord

Rows = npt.NDArray[np.float32]


def widths(record: ModelRecord) -> list[int]:
    """The widths a request may ask ``record`` for, widest first."""
    return sorted({record.dimensions, *record.matryoshka_dimensions}, reverse=True)


def check_width(width: int | None, record: ModelRecord, field: str) -> None:
    """``ValidationFailed`` unless ``width`` (None: the model's own) is one ``record`` has."""
    if width is None or width == record.dimensions or width in record.matryoshka_dimensions:
        return
    if not record.matryoshka_dimensions:
        raise ValidationFailed(
            f"`{field}`: model {record.name!r} produces {record.dimensions} dimensions, not "
            f"{width}; it was not trained to be truncated (Matryoshka), so omit `{field}`"
        )
    allowed = ", ".join(map(str, widths(record)))
    raise ValidationFailed(
        f"`{field}`: model {record.name!r} can produce {allowed} dimensions, not {width}"
    )


def narrowed(rows: Rows, width: int | None) -> Rows:
    """The first ``width`` components of each row, L2-normalised again; ``rows`` itself when
    no narrower width is asked (``check_width`` said it is one the model has)."""
    if width is None or width >= rows.shape[1]:
        return rows
    head = rows[:, :width]
    norms = np.linalg.norm(head, axis=1, keepdims=True)
    unit: Rows = (head / np.maximum(norms, np.finfo(np.float32).tiny)).astype(np.float32)
    return unit


def check_max_tokens(limit: int | None, record: ModelRecord, field: str) -> None:
    """``ValidationFailed`` if ``limit`` asks for texts cut shorter than the model cuts them."""
    if limit is None:
        return
    if limit < 1:
        raise ValidationFailed(f"`{field}` must be at least 1, not {limit}")
    if record.max_tokens and limit < record.max_tokens:
        raise ValidationFailed(
            f"`{field}` is {limit}, but model {record.name!r} reads up to {record.max_tokens} "
            f"tokens of each text and headway cannot cut it shorter: omit `{field}` or send "
            f"at least {record.max_tokens}"
        )
