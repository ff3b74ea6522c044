"""Things tests build for themselves: tiny random-weight model folders, usage events."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import msgspec

from headway.metering.event import UsageEvent
from headway.models.importer import default_model_dir

TINY_MAX_POSITIONS = 128


Architecture = Literal["bert", "roberta", "xlm-roberta", "distilbert", "mpnet"]
ARCHITECTURES: tuple[Architecture, ...] = ("bert", "roberta", "xlm-roberta", "distilbert", "mpnet")
_WORDPIECE = ("bert", "distilbert")  # the MiniLM tokenizer; the others get a byte-level BPE


def bpe_tokenizer(corpus: Iterable[str], max_tokens: int) -> Any:
    """A byte-level BPE tokenizer trained on ``corpus``, with RoBERTa's special tokens
    (``<s>`` 0, ``<pad>`` 1, ``</s>`` 2) and pair template ``<s> A </s></s> B </s>``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=800,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(list(corpus), trainer)
    tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        sep_token="</s>",
        cls_token="<s>",
        pad_token="<pad>",
        unk_token="<unk>",
        mask_token="<mask>",
        model_max_length=max_tokens,
    )


def build_tiny_transformer(
    directory: Path,
    architecture: Architecture,
    *,
    cross_encoder: bool = False,
    corpus: Iterable[str] = (),
    seed: int = 7,
) -> Path:
    """A seeded, random ``architecture`` model (its base model, or its
    ``…ForSequenceClassification`` with one label) saved as transformers saves any
    checkpoint, with a tokenizer beside it, limited to ``TINY_MAX_POSITIONS`` tokens."""
    import torch
    import transformers as tf

    torch.manual_seed(seed)
    common: dict[str, Any] = {"initializer_range": 0.2, "num_labels": 1}
    if architecture in _WORDPIECE:
        tokenizer = tf.AutoTokenizer.from_pretrained(default_model_dir())
        tokenizer.model_max_length = TINY_MAX_POSITIONS
    else:
        tokenizer = bpe_tokenizer(corpus, TINY_MAX_POSITIONS)
    layers = {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
    }
    if architecture == "bert":
        config: Any = tf.BertConfig(
            vocab_size=tokenizer.vocab_size,
            max_position_embeddings=TINY_MAX_POSITIONS,
            **layers,
            **common,
        )
        base, task = tf.BertModel, tf.BertForSequenceClassification
    elif architecture in ("roberta", "xlm-roberta"):
        configs = {"roberta": tf.RobertaConfig, "xlm-roberta": tf.XLMRobertaConfig}
        config = configs[architecture](
            vocab_size=tokenizer.vocab_size,
            max_position_embeddings=TINY_MAX_POSITIONS + 2,
            type_vocab_size=1,
            pad_token_id=1,
            bos_token_id=0,
            eos_token_id=2,
            **layers,
            **common,
        )
        models = {
            "roberta": (tf.RobertaModel, tf.RobertaForSequenceClassification),
            "xlm-roberta": (tf.XLMRobertaModel, tf.XLMRobertaForSequenceClassification),
        }
        base, task = models[architecture]
    elif architecture == "mpnet":
        config = tf.MPNetConfig(
            vocab_size=tokenizer.vocab_size,
            max_position_embeddings=TINY_MAX_POSITIONS + 2,
            pad_token_id=1,
            bos_token_id=0,
            eos_token_id=2,
            **layers,
            **common,
        )
        base, task = tf.MPNetModel, tf.MPNetForSequenceClassification
    else:
        config = tf.DistilBertConfig(
            vocab_size=tokenizer.vocab_size,
            max_position_embeddings=TINY_MAX_POSITIONS,
            dim=32,
            n_layers=2,
            n_heads=4,
            hidden_dim=64,
            **common,
        )
        base, task = tf.DistilBertModel, tf.DistilBertForSequenceClassification
    model = (task if cross_encoder else base)(config).eval()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def build_tiny_sentence_transformer(
    directory: Path,
    architecture: Architecture,
    *,
    pooling: str = "mean",
    normalize: bool = True,
    prompts: dict[str, str] | None = None,
    default_prompt_name: str | None = None,
    corpus: Iterable[str] = (),
) -> Any:
    """A random ``architecture`` encoder saved in ``directory`` as a sentence-transformers
    folder (Transformer → Pooling → Normalize), with ``prompts``; returns the model."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import modules as models

    base = build_tiny_transformer(
        directory.with_name(f"{directory.name}-base"), architecture, corpus=corpus
    )
    transformer = models.Transformer(str(base))
    modules: list[Any] = [
        transformer,
        models.Pooling(transformer.get_embedding_dimension(), pooling_mode=pooling),
    ]
    if normalize:
        modules.append(models.Normalize())
    model = SentenceTransformer(
        modules=modules, prompts=prompts, default_prompt_name=default_prompt_name, device="cpu"
    )
    model.save(str(directory))
    shutil.rmtree(base)
    return model


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
