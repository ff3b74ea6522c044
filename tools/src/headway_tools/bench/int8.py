"""fp32 against int8 (dynamic, per-channel): accuracy and speed of the same model.

Accuracy: cosine of each text's two embeddings, and nearest-neighbour agreement
(would a search return the same closest text), over the benchmark corpus.
Speed: raw ONNX Runtime sentences/s on one thread, side by side in one run.
``run_int8_bench`` measures and returns ``Int8Results``; ``render`` writes them as
the Markdown section ``int8``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from headway.catalog import ensure_default_model, register
from headway.models.evaluate import ModelComparison, compare_models
from headway.models.store import ModelStore, StoredModel
from headway.registry.sqlite import Registry
from headway.settings import load_settings
from headway_tools.bench.host import Machine
from headway_tools.bench.raw import run_point
from headway_tools.bench.stats import markdown_table
from headway_tools.loadgen.corpus import sentences

SECTION = "int8"
ACCURACY_TEXTS = 1024
BATCHES = (1, 8, 32)


@dataclass(frozen=True, slots=True)
class Variant:
    """One of the two models: its version and the size of its ONNX graph."""

    version: str
    megabytes: float

    @classmethod
    def of(cls, model: StoredModel) -> Variant:
        return cls(model.version, model.onnx_path.stat().st_size / 1e6)


@dataclass(frozen=True, slots=True)
class Speed:
    """Raw sentences/s of both models at one (length-planned) batch size."""

    batch: int
    fp32_sentences_per_s: float
    int8_sentences_per_s: float


@dataclass(frozen=True, slots=True)
class Int8Results:
    fp32: Variant
    int8: Variant
    accuracy: ModelComparison
    speeds: Sequence[Speed]


def run_int8_bench(data_dir: Path, *, seconds: float) -> Int8Results:
    from headway.variants import derive_int8
    from headway.worker.backends.onnx import OnnxBackend

    settings = load_settings(flags={"data_dir": str(data_dir)})
    registry = Registry(settings.registry_path)
    store = ModelStore(settings.model_root)
    fp32_record = ensure_default_model(settings, registry)
    fp32_model = store.get(fp32_record.version)
    int8_model = derive_int8(store, fp32_model)
    register(registry, int8_model, ("all-MiniLM-L6-v2-int8", "minilm-int8"))
    fp32, int8 = OnnxBackend.load(fp32_model), OnnxBackend.load(int8_model)
    corpus = sentences(ACCURACY_TEXTS)
    accuracy = compare_models(fp32, int8, corpus)
    max_tokens = settings.worker.max_batch_tokens
    speeds = []
    for batch in BATCHES:
        fp32_rate, int8_rate = (
            run_point(
                backend,
                corpus,
                batch=batch,
                length_sorted=True,
                seconds=seconds,
                max_batch_tokens=max_tokens,
            ).sentences_per_s
            for backend in (fp32, int8)
        )
        speeds.append(Speed(batch, fp32_rate, int8_rate))
    return Int8Results(Variant.of(fp32_model), Variant.of(int8_model), accuracy, speeds)


def render(results: Int8Results, machine: Machine, command: str, seconds: float) -> str:
    fp32, int8, accuracy = results.fp32, results.int8, results.accuracy
    return "\n\n".join(
        [
            "## int8 dynamic quantization (per-channel) against fp32",
            f"Command: `{command}`  \nDate: {machine.date}  \n"
            f"Commit: `{machine.commit}` (CPU: {machine.cpu_model})  \n"
            f"Machine: {machine.nproc} CPUs, {machine.cpu_model}; one intra-op thread; "
            f"{seconds:g} s per point; {ACCURACY_TEXTS} generated sentences of 13–98 tokens.  \n"
            f"Versions: fp32 `{fp32.version[:12]}` ({fp32.megabytes:.1f} MB), "
            f"int8 `{int8.version[:12]}` ({int8.megabytes:.1f} MB; word embeddings stay fp32). "
            "Import it with `headway models import --int8`; fp32 stays the default. "
            "The generated sentences are random words, so many of their nearest neighbours "
            "are near-ties that any perturbation flips: read the agreement as a lower bound. "
            "On the 66 meaningful texts of `tests/models` (paraphrase pairs, many scripts) "
            "the same comparison gave mean cosine 0.9905 and 95.5% agreement "
            "(`pytest tests/models/test_int8.py -s` prints it).",
            markdown_table(
                ["mean cosine to fp32", "min cosine", "same nearest neighbour"],
                [
                    [
                        f"{accuracy.mean_cosine:.4f}",
                        f"{accuracy.min_cosine:.4f}",
                        f"{100 * accuracy.nn_agreement:.1f}%",
                    ]
                ],
                "rrr",
            ),
            markdown_table(
                ["batch (length-planned)", "fp32 sentences/s", "int8 sentences/s", "speed-up"],
                [
                    [
                        str(s.batch),
                        f"{s.fp32_sentences_per_s:.1f}",
                        f"{s.int8_sentences_per_s:.1f}",
                        f"{s.int8_sentences_per_s / s.fp32_sentences_per_s:.2f}×",
                    ]
                    for s in results.speeds
                ],
                "rrrr",
            ),
        ]
    )
