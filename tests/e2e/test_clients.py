"""Clients as users have them, unchanged, against a real ``headway up`` with the real model:
the official OpenAI and Cohere SDKs (v1 and ``ClientV2``), ``huggingface_hub``'s
``InferenceClient`` (TEI's protocol), LangChain's ``OpenAIEmbeddings`` and
``CohereRerank``, LlamaIndex's ``OpenAIEmbedding``. Each embeds or reranks through headway
and gets what the native routes give: the same float32 vectors (every client here reads
float32 values back exactly: JSON written as each float32's shortest decimal, or base64 of
the float32 bytes), the same ranking and scores. The results cache is off, so every client's
vectors are computed, not found; with one embed replica, every request of the same texts is
the same batch, so the same bits.

The snippets of README's "Use it from…" are these calls.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.e2e.conftest import Up, start_up

pytestmark = pytest.mark.e2e

KEY = "demo-key-search-app"
MODEL = "all-MiniLM-L6-v2"
TEXTS = [
    "Pump vibration rises when the bearing wears out",
    "Invoice 4471 is overdue",
    "The compressor seal leaked overnight and the line lost pressure",
    "why is the pump vibrating",
]
QUERY = "why is the pump vibrating"
DOCUMENTS = [
    "Invoice 4471 is overdue",
    "Pump vibration rises when the bearing wears out",
    "The compressor seal leaked",
]


@pytest.fixture(scope="module")
def up(model_data_dir: Path) -> Iterator[Up]:
    running = start_up(
        model_data_dir,
        "--embed-replicas",
        "1",
        "--rerank-replicas",
        "1",
        env={"HEADWAY_GATEWAY__CACHE__ENABLED": "false"},
    )
    yield running
    running.stop(signal.SIGTERM)


def native_vectors(up: Up, texts: list[str]) -> np.ndarray:
    """``texts`` through ``/v1/embeddings`` in one request (the same batch as the client's),
    as JSON floats read back as float32."""
    response = httpx.post(
        up.url + "/v1/embeddings",
        headers={"authorization": f"Bearer {KEY}"},
        json={"model": MODEL, "input": texts},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    return np.asarray([d["embedding"] for d in response.json()["data"]], dtype=np.float32)


@pytest.fixture(scope="module")
def native(up: Up) -> np.ndarray:
    return native_vectors(up, TEXTS)


@pytest.fixture(scope="module")
def native_ranking(up: Up) -> list[tuple[int, float]]:
    """``DOCUMENTS`` through ``/v1/rerank``: (index, score), most relevant first."""
    response = httpx.post(
        up.url + "/v1/rerank",
        headers={"authorization": f"Bearer {KEY}"},
        json={"model": MODEL, "query": QUERY, "documents": DOCUMENTS},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    return [(r["index"], r["relevance_score"]) for r in response.json()["results"]]


def assert_same_vectors(got: object, native: np.ndarray) -> None:
    vectors = np.asarray(got, dtype=np.float32)
    assert vectors.shape == native.shape
    np.testing.assert_array_equal(vectors, native)


def assert_same_ranking(got: list[tuple[int, float]], native: list[tuple[int, float]]) -> None:
    assert [index for index, _ in got] == [index for index, _ in native[: len(got)]]
    for (_, score), (_, expected) in zip(got, native, strict=False):
        assert score == pytest.approx(expected, abs=1e-6)


def test_openai_sdk(up: Up, native: np.ndarray) -> None:
    from openai import OpenAI, UnprocessableEntityError

    with OpenAI(base_url=f"{up.url}/v1", api_key=KEY) as client:
        response = client.embeddings.create(model=MODEL, input=TEXTS)  # the SDK asks for base64
        assert_same_vectors([d.embedding for d in response.data], native)
        with pytest.raises(UnprocessableEntityError, match="check_embedding_ctx_length=False"):
            client.embeddings.create(model=MODEL, input=[[101, 7592, 102]])  # token ids


def test_cohere_client_v2_embeds_and_reranks(
    up: Up, native: np.ndarray, native_ranking: list[tuple[int, float]]
) -> None:
    import cohere

    types = ["float", "int8", "uint8", "binary", "ubinary", "base64"]
    with cohere.ClientV2(api_key=KEY, base_url=up.url) as co:
        embedded = co.embed(
            model=MODEL, texts=TEXTS, input_type="search_document", embedding_types=types
        )
        plain = co.embed(model=MODEL, texts=TEXTS, input_type="search_query")
        ranked = co.rerank(model=MODEL, query=QUERY, documents=DOCUMENTS, top_n=2)
        long = ["alpha " * 200 + "omega " * 200, *TEXTS]  # 402 tokens
        start = co.embed(model=MODEL, texts=long, input_type="search_query", truncate="START")
        end = co.embed(model=MODEL, texts=long, input_type="search_query", truncate="END")
        kept = co.embed(model=MODEL, texts=TEXTS, input_type="search_query", truncate="NONE")
        with pytest.raises(cohere.UnprocessableEntityError) as refused:
            co.embed(model=MODEL, texts=long, input_type="search_query", truncate="NONE")
    message = refused.value.body["error"]["message"]
    assert "1 input(s) over the model's limit of 256 tokens, the longest 402 tokens" in message
    assert "(146 over)" in message
    assert_same_vectors(kept.embeddings.float_, native)  # none too long: nothing refused
    assert_same_vectors(start.embeddings.float_[1:], native)  # short texts lose nothing
    head, tail = np.asarray(end.embeddings.float_[0]), np.asarray(start.embeddings.float_[0])
    assert float(head @ tail) < 0.9999, "START keeps the text's end, END its start"
    assert_same_vectors(embedded.embeddings.float_, native)
    quantised = np.asarray(embedded.embeddings.int8, dtype=np.float64)
    assert quantised.shape == native.shape and np.abs(quantised).max() <= 127
    cosines = (quantised * native).sum(1) / np.linalg.norm(quantised, axis=1)
    assert cosines.min() > 0.99
    assert np.array_equal(np.asarray(embedded.embeddings.uint8) - 128, quantised)
    assert np.asarray(embedded.embeddings.ubinary).shape == (len(TEXTS), 384 // 8)
    assert embedded.meta is not None and embedded.meta.billed_units is not None
    assert embedded.meta.billed_units.input_tokens > 0
    assert_same_vectors(plain.embeddings.float_, native)
    assert_same_ranking([(r.index, r.relevance_score) for r in ranked.results], native_ranking)
    assert len(ranked.results) == 2


def test_cohere_v1_client_reranks(up: Up, native_ranking: list[tuple[int, float]]) -> None:
    import cohere

    with cohere.Client(api_key=KEY, base_url=up.url) as co:
        ranked = co.rerank(model=MODEL, query=QUERY, documents=DOCUMENTS, top_n=2)
    assert_same_ranking([(r.index, r.relevance_score) for r in ranked.results], native_ranking)


def test_huggingface_hub_inference_client(up: Up, native: np.ndarray) -> None:
    from huggingface_hub import InferenceClient
    from huggingface_hub.errors import HfHubHTTPError

    with InferenceClient(base_url=up.url, api_key=KEY) as client:  # posts to the base URL
        many = client.feature_extraction(TEXTS)
        one = client.feature_extraction(TEXTS[0])
        with pytest.raises(HfHubHTTPError, match="`normalize: false` is not served"):
            client.feature_extraction(TEXTS, normalize=False)  # TEI's error body, read
    assert_same_vectors(many, native)
    assert one.shape == (1, 384)
    assert_same_vectors(one, native_vectors(up, TEXTS[:1]))
    info = httpx.get(f"{up.url}/info", headers={"authorization": f"Bearer {KEY}"}).json()
    assert info["model_id"] == MODEL and info["max_input_length"] == 256


def test_langchain_openai_embeddings(up: Up, native: np.ndarray) -> None:
    from langchain_openai import OpenAIEmbeddings

    embeddings = OpenAIEmbeddings(
        model=MODEL,
        base_url=f"{up.url}/v1",
        api_key=KEY,
        check_embedding_ctx_length=False,  # send text, not tiktoken's token ids
    )
    assert_same_vectors(embeddings.embed_documents(TEXTS), native)
    assert_same_vectors([embeddings.embed_query(QUERY)], native_vectors(up, [QUERY]))


def test_langchain_cohere_rerank(up: Up, native_ranking: list[tuple[int, float]]) -> None:
    from langchain_cohere import CohereRerank
    from langchain_core.documents import Document

    reranker = CohereRerank(model=MODEL, cohere_api_key=KEY, base_url=up.url, top_n=2)
    with reranker.client:  # the cohere.ClientV2 it built, closed after
        ranked = reranker.rerank(DOCUMENTS, QUERY)
        kept = reranker.compress_documents([Document(d) for d in DOCUMENTS], QUERY)
    assert_same_ranking([(r["index"], r["relevance_score"]) for r in ranked], native_ranking)
    assert [d.page_content for d in kept] == [DOCUMENTS[i] for i, _ in native_ranking[:2]]


def test_llama_index_openai_embedding(up: Up, native: np.ndarray) -> None:
    from llama_index.embeddings.openai import OpenAIEmbedding

    # `model` must be one of OpenAI's names (checked when built); `model_name` is what is sent.
    embed_model = OpenAIEmbedding(model_name=MODEL, api_base=f"{up.url}/v1", api_key=KEY)
    assert_same_vectors(embed_model.get_text_embedding_batch(TEXTS), native)
    assert_same_vectors([embed_model.get_query_embedding(QUERY)], native_vectors(up, [QUERY]))


def test_curl_shaped_requests_to_every_route(up: Up) -> None:
    """What README's curl lines send (form-urlencoded content type, as ``curl -d`` does)."""
    one = native_vectors(up, TEXTS[:1])
    form = {"authorization": f"Bearer {KEY}", "content-type": "application/x-www-form-urlencoded"}
    with httpx.Client(base_url=up.url, headers=form, timeout=60) as client:

        def post(path: str, body: dict[str, object]) -> httpx.Response:
            response = client.post(path, content=json.dumps(body))
            assert response.status_code == 200, response.text
            return response

        v2 = post("/v2/embed", {"model": MODEL, "texts": TEXTS[:1], "input_type": "search_query"})
        assert_same_vectors(v2.json()["embeddings"]["float"], one)
        assert_same_vectors(post("/embed", {"inputs": TEXTS[0]}).json(), one)
        ranked = post("/rerank", {"query": QUERY, "texts": DOCUMENTS[:2]}).json()
        assert [r["index"] for r in ranked] == [1, 0]


def readme_blocks(language: str) -> list[str]:
    """The ``language`` code blocks of README's "Use it from…" section, in order."""
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Use it from…\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.DOTALL)


def test_the_readme_snippets_run_as_written(up: Up) -> None:
    """Every Python snippet of "Use it from…" runs, on this gateway instead of :8080, and
    every curl line answers 200 with JSON."""
    snippets = readme_blocks("python")
    assert len(snippets) >= 5
    for snippet in snippets:
        namespace: dict[str, object] = {}
        exec(compile(snippet.replace("http://localhost:8080", up.url), "README", "exec"), namespace)
        for client in namespace.values():
            if hasattr(client, "__exit__") and hasattr(client, "_client_wrapper"):
                client.__exit__(None, None, None)  # a cohere client: close its connections
        reranker = namespace.get("reranker")
        if reranker is not None:
            reranker.client.__exit__(None, None, None)  # type: ignore[attr-defined]
    (script,) = readme_blocks("sh")
    key, *lines = script.replace("localhost:8080", up.url.removeprefix("http://")).split("\ncurl ")
    for line in lines:
        run = subprocess.run(
            ["bash", "-c", f"{key}\ncurl -w '\\n%{{http_code}}' {line}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        body, _, status = run.stdout.rpartition("\n")
        assert status == "200", (line, run.stdout)
        json.loads(body)


def test_tei_tokenize_and_decode_are_the_models_tokenizer(up: Up) -> None:
    from tokenizers import Tokenizer

    from headway.models.importer import default_model_dir

    reference = Tokenizer.from_file(str(default_model_dir() / "tokenizer.json"))
    reference.no_truncation()
    reference.no_padding()
    text = "Pump vibration rises when the bearing wears out " * 40  # past the 256-token limit
    headers = {"authorization": f"Bearer {KEY}"}
    tokens = httpx.post(f"{up.url}/tokenize", headers=headers, json={"inputs": text}).json()[0]
    expected = reference.encode(text)
    assert [t["id"] for t in tokens] == expected.ids and len(tokens) > 256  # never truncated
    assert [t["text"] for t in tokens[1:4]] == ["Pump", "vibration", "rises"]  # the input's own
    assert [(t["start"], t["stop"]) for t in tokens[1:3]] == [(0, 4), (5, 14)]
    assert (tokens[0]["text"], tokens[0]["special"], tokens[0]["start"]) == ("[CLS]", True, None)
    decoded = httpx.post(f"{up.url}/decode", headers=headers, json={"ids": expected.ids}).json()
    assert decoded == [reference.decode(expected.ids)]
    refused = httpx.post(f"{up.url}/decode", headers=headers, json={"ids": [10**9]})
    assert refused.status_code == 422 and "from 0 to 30521" in refused.json()["error"]
