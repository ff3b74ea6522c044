"""Your own models through real processes: folders in, served through `headway up --model`,
checked with the OpenAI SDK against sentence-transformers on torch.

One stack serves a random-weight model of every architecture, as an embedding model and as
a cross-encoder (the embed and rerank workers each hold several, loaded on demand); a model
imported while it runs is served with no restart; three models on a worker with a memory
budget for two are all answered, loading and unloading as they take turns.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from tests.builders import (
    ARCHITECTURES,
    build_tiny_sentence_transformer,
    build_tiny_transformer,
)
from tests.e2e.conftest import start_up, wait_for
from tests.e2e.test_up import HEADWAY, SEARCH_APP
from tests.models.conftest import EVAL_TEXTS

pytestmark = pytest.mark.e2e

TEXTS = [*EVAL_TEXTS[:24], EVAL_TEXTS[-6]]  # and one past the 128-token limit
QUERY = "how do batching and admission control keep latency predictable?"
DOCUMENTS = [
    "Admission control refuses work that cannot finish before its deadline.",
    "Dynamic batching groups requests to amortise the cost of each model call.",
    "The recipe calls for two cups of flour and a pinch of salt.",
    "Latency stays flat when the queue is bounded and overload is shed early. " * 20,
]
POOLING = {"bert": "mean", "roberta": "cls", "xlm-roberta": "mean", "distilbert": "lasttoken"}


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def copied(model_data_dir: Path, tmp_path: Path) -> Path:
    """A data directory of its own, with the default model already imported."""
    data_dir = tmp_path / "data"
    shutil.copytree(model_data_dir, data_dir)
    return data_dir


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bring")
    made: dict[str, Path] = {}
    for architecture in ARCHITECTURES:
        embedder = root / f"tiny-{architecture}"
        build_tiny_sentence_transformer(
            embedder, architecture, pooling=POOLING.get(architecture, "mean"), corpus=EVAL_TEXTS
        )
        made[embedder.name] = embedder
        reranker = root / f"tiny-{architecture}-reranker"
        build_tiny_transformer(reranker, architecture, cross_encoder=True, corpus=EVAL_TEXTS)
        made[reranker.name] = reranker
    return made


def test_every_architecture_served_through_up_matches_torch(
    folders: dict[str, Path], model_data_dir: Path, tmp_path: Path
) -> None:
    import openai
    from sentence_transformers import CrossEncoder, SentenceTransformer

    data_dir = copied(model_data_dir, tmp_path)
    args = [arg for folder in folders.values() for arg in ("--model", str(folder))]
    up = start_up(data_dir, "--rerank-replicas", "1", *args, timeout_s=240)
    try:
        served_lines = [line for line in up.lines if line.startswith("serving ")]
        assert len(served_lines) == len(folders)
        client = openai.OpenAI(
            base_url=up.url + "/v1", api_key=SEARCH_APP["authorization"][7:], max_retries=0
        )
        report = {}
        for name, folder in folders.items():
            assert any(f"as model '{name}'" in line for line in served_lines)
            if name.endswith("-reranker"):
                expected = CrossEncoder(str(folder), device="cpu").predict(
                    [(QUERY, d) for d in DOCUMENTS]
                )
                with up.client() as http:
                    answer = http.post(
                        "/v1/rerank",
                        headers=SEARCH_APP,
                        json={"model": name, "query": QUERY, "documents": DOCUMENTS},
                    )
                assert answer.status_code == 200, answer.text
                scores = {r["index"]: r["relevance_score"] for r in answer.json()["results"]}
                served = np.array([scores[i] for i in range(len(DOCUMENTS))])
                report[name] = float(np.abs(served - expected).max())
                np.testing.assert_allclose(served, expected, rtol=0, atol=1e-5)
            else:
                expected = SentenceTransformer(str(folder), device="cpu").encode(TEXTS)
                answer = client.embeddings.create(model=name, input=TEXTS)
                served = np.array([row.embedding for row in answer.data])
                report[name] = float(cosines(served, expected).min())
                assert report[name] >= 0.99999, name
        print("served against torch (min cosine / max score difference):", report)
    finally:
        assert up.stop(signal.SIGTERM) == 0


def test_a_model_imported_while_running_is_served_without_a_restart(
    folders: dict[str, Path], model_data_dir: Path, tmp_path: Path
) -> None:
    data_dir = copied(model_data_dir, tmp_path)
    up = start_up(data_dir, "--rerank-replicas", "0")
    try:
        command = ["models", "import", str(folders["tiny-mpnet"]), "--alias", "hot"]
        subprocess.run([*HEADWAY, *command, "--data-dir", str(data_dir)], check=True)
        imported = time.monotonic()
        body = {"model": "hot", "input": ["served without a restart"]}
        with up.client() as http:
            wait_for(
                lambda: (
                    http.post("/v1/embeddings", headers=SEARCH_APP, json=body).status_code == 200
                ),
                timeout_s=5,
                what="the imported alias served",
                interval_s=0.1,
            )
        print(f"imported alias served {time.monotonic() - imported:.2f} s after the import")
    finally:
        assert up.stop(signal.SIGTERM) == 0


def test_three_models_on_a_worker_with_room_for_two_are_all_answered(
    folders: dict[str, Path], model_data_dir: Path, tmp_path: Path
) -> None:
    data_dir = copied(model_data_dir, tmp_path)
    names = ["tiny-roberta", "tiny-xlm-roberta", "tiny-mpnet"]  # about the same size
    versions = []
    for name in names:
        imported = subprocess.run(
            [*HEADWAY, "models", "import", str(folders[name]), "--data-dir", str(data_dir)],
            check=True,
            capture_output=True,
            text=True,
        )
        versions.append(imported.stdout.split()[0])
    size = {v: sum(f.stat().st_size for f in (data_dir / "models" / v).iterdir()) for v in versions}
    default = next(d for d in (data_dir / "models").iterdir() if d.name.startswith("ca23"))
    room = sum(f.stat().st_size for f in default.iterdir()) + 2.5 * max(size.values())
    assert 2.5 * max(size.values()) < sum(size.values()), "room for two, not three"
    budget = room / 1e6
    env = {"HEADWAY_WORKER__MEMORY_BUDGET_MB": f"{budget:.3f}"}
    up = start_up(data_dir, "--rerank-replicas", "0", env=env)
    try:
        loading: list[float] = []
        with up.client() as http:
            for turn in range(12):
                name = names[turn % 3]
                started = time.perf_counter()
                answer = http.post(
                    "/v1/embeddings",
                    headers=SEARCH_APP,
                    json={"model": name, "input": [f"turn {turn}"]},  # never a cached text
                )
                assert answer.status_code == 200, answer.text
                loading.append(time.perf_counter() - started)
    finally:
        assert up.stop(signal.SIGTERM) == 0  # and the worker's log is all read
    loads = sum("worker loaded version" in line for line in up.lines)
    unloads = sum("(memory budget)" in line for line in up.lines)
    # every turn's model is the least recently used one: each loads (the first, the default,
    # at start), and each from the third on unloads another
    assert (loads, unloads) == (13, 10), "".join(up.lines[-40:])
    p50, p99 = (np.percentile(loading, q) * 1000 for q in (50, 99))
    print(
        f"12 requests over 3 models, budget for 2: {loads - 1} loads, {unloads} unloads; "
        f"a request with a load: p50 {p50:.0f} ms, p99 {p99:.0f} ms"
    )


def test_prompts_follow_the_request_as_sentence_transformers_applies_them(
    model_data_dir: Path, tmp_path: Path
) -> None:
    """An E5-style model (``query: ``/``passage: ``, no default) as the default embedding
    model: Cohere's ``input_type`` and TEI's ``prompt_name`` choose the prompt, OpenAI's
    request gets none; vectors and billed tokens are sentence-transformers' own."""
    import cohere
    import openai
    from huggingface_hub import InferenceClient
    from huggingface_hub.errors import HfHubHTTPError

    folder = tmp_path / "tiny-e5"
    prompts = {"query": "query: ", "passage": "passage: "}
    reference = build_tiny_sentence_transformer(
        folder, "xlm-roberta", prompts=prompts, corpus=EVAL_TEXTS
    )
    data_dir = copied(model_data_dir, tmp_path)
    env = {"HEADWAY_EMBED_MODEL": "tiny-e5"}  # TEI's /embed serves the default model
    up = start_up(data_dir, "--rerank-replicas", "0", "--model", str(folder), env=env)
    key = SEARCH_APP["authorization"][7:]
    texts = TEXTS[:8]

    def expected(prompt_name: str | None) -> np.ndarray:
        return np.asarray(reference.encode(texts, prompt_name=prompt_name))

    def tokens(prompt: str) -> int:
        features = reference.preprocess([prompt + t for t in texts])
        return int(features["attention_mask"].sum())

    try:
        with cohere.ClientV2(api_key=key, base_url=up.url) as co:
            query = co.embed(model="tiny-e5", texts=texts, input_type="search_query")
            document = co.embed(model="tiny-e5", texts=texts, input_type="search_document")
        assert cosines(np.asarray(query.embeddings.float_), expected("query")).min() >= 0.99999
        # sentence-transformers saves a "document" prompt ("") beside the ones it was given:
        # search_document takes it, as its encode_document does
        assert reference.prompts["document"] == ""
        served_documents = np.asarray(document.embeddings.float_)
        assert cosines(served_documents, expected("document")).min() >= 0.99999
        assert query.meta.billed_units.input_tokens == tokens("query: ")  # type: ignore[union-attr]

        with InferenceClient(base_url=up.url, api_key=key) as tei:
            passage = tei.feature_extraction(texts, prompt_name="passage")
            with pytest.raises(
                HfHubHTTPError, match=r"has no such prompt \(it has document, passage, query\)"
            ):
                tei.feature_extraction(texts, prompt_name="instruction")
        assert cosines(np.asarray(passage), expected("passage")).min() >= 0.99999

        client = openai.OpenAI(base_url=up.url + "/v1", api_key=key, max_retries=0)
        plain = client.embeddings.create(model="tiny-e5", input=texts)
        served = np.array([row.embedding for row in plain.data])
        assert cosines(served, expected(None)).min() >= 0.99999
        assert plain.usage.prompt_tokens == tokens("")
        assert cosines(served, expected("query")).min() < 0.9999, "the prompt changes the vector"
    finally:
        assert up.stop(signal.SIGTERM) == 0


def test_the_guides_first_request_runs_as_written(model_data_dir: Path, tmp_path: Path) -> None:
    """docs/models.md's "From a folder to a first request", its two commands as they stand
    (the folder the guide calls ./my-model made here, the gateway on a free port)."""
    from sentence_transformers import SentenceTransformer

    guide = (Path(__file__).parents[2] / "docs" / "models.md").read_text(encoding="utf-8")
    section = guide.split("## From a folder to a first request", 1)[1]
    block = section.split("```", 2)[1]
    up_line, curl = block.strip().split("\n", 1)
    assert up_line.startswith("headway up --model ./my-model")
    folder = tmp_path / "my-model"
    build_tiny_sentence_transformer(folder, "mpnet", corpus=EVAL_TEXTS)
    data_dir = copied(model_data_dir, tmp_path)
    args = up_line.split("#")[0].split()[2:]
    up = start_up(data_dir, *[str(folder) if a == "./my-model" else a for a in args])
    try:
        command = curl.replace("\\\n", " ").replace(
            "localhost:8080", up.url.removeprefix("http://")
        )
        run = subprocess.run(
            ["bash", "-c", command], capture_output=True, text=True, timeout=60, check=True
        )
        served = np.array([json.loads(run.stdout)["data"][0]["embedding"]])
        expected = SentenceTransformer(str(folder), device="cpu").encode(["hello"])
        assert cosines(served, expected).min() >= 0.99999
    finally:
        assert up.stop(signal.SIGTERM) == 0
