"""Things tests build for themselves: a tiny cross-encoder checkpoint, usage events."""

from __future__ import annotations

import shutil
from pathlib import Path

import msgspec

from headway.metering.event import UsageEvent
from headway.models.importer import default_model_dir

TINY_MAX_POSITIONS = 128


def build_tiny_cross_encoder(directory: Path, seed: int = 1234) -> Path:
    """A seeded, random BertForSequenceClassification saved as transformers saves any
    checkpoint (``bert.``-prefixed safetensors), with the MiniLM tokenizer beside it.

    No PyPI package ships a reranker's weights, so the tests make one.
    """
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=TINY_MAX_POSITIONS,
        num_labels=1,
        initializer_range=0.2,  # wide enough that scores spread out and ranks are stable
    )
    model = BertForSequenceClassification(config).eval()
    model.save_pretrained(directory)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copyfile(default_model_dir() / name, directory / name)
    return directory


NOV_1 = 1_793_491_200.0
"""2026-11-01T00:00:00Z."""


def usage_event(request_id: str, **fields: object) -> UsageEvent:
    """A valid billable event of tenant ``acme`` at ``NOV_1``; ``fields`` override any field."""
    values: dict[str, object] = {
        "request_id": request_id,
        "tenant_id": 1,
        "tenant": "acme",
        "key_id": "0123456789abcdef",
        "endpoint": "embeddings",
        "alias": "all-MiniLM-L6-v2",
        "version": "v" * 64,
        "tier": "interactive",
        "texts": 2,
        "tokens": 17,
        "outcome": "served",
        "billable": True,
        "queue_s": 0.001,
        "inference_s": 0.01,
        "total_s": 0.02,
        "gateway_id": "gw-1",
        "at": NOV_1 + 60,
    }
    values.update(fields)
    return UsageEvent(**values)  # type: ignore[arg-type]


def schema_1(event: UsageEvent) -> bytes:
    """``event`` as a gateway wrote it before events carried tenant ids: no ``tenant_id``,
    ``schema`` 1 (what an outbox or the stream may still hold during an upgrade)."""
    fields = msgspec.structs.asdict(event)
    del fields["tenant_id"]
    fields["schema"] = 1
    return msgspec.json.encode(fields)
