"""The prepared copy: the same outputs as the artifact, weights mapped and shared."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from headway.models.importer import import_default
from headway.models.prepared import PREPARED_DIR, WEIGHTS_FILE, ensure_prepared, prepared_dir
from headway.models.store import ModelStore, StoredModel
from headway.worker.backends import onnx as onnx_backend
from headway.worker.backends.onnx import OnnxBackend

linux_only = pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs /proc")


def test_mapped_outputs_equal_the_artifacts(
    default_model: StoredModel, eval_texts: tuple[str, ...]
) -> None:
    mapped = OnnxBackend.load(default_model, mapped_weights=True)
    heap = OnnxBackend.load(default_model, mapped_weights=False)
    encoded = heap.encode_texts(eval_texts)
    ours, theirs = mapped.run(encoded), heap.run(encoded)
    assert np.abs(ours - theirs).max() <= 1e-6
    one = [encoded[7]]
    assert np.abs(mapped.run(one) - heap.run(one)).max() <= 1e-6


def test_the_copy_is_built_once_and_reused(default_model: StoredModel) -> None:
    graph = ensure_prepared(default_model)
    weights = graph.parent / WEIGHTS_FILE
    stamp = (weights.stat().st_ino, weights.stat().st_mtime_ns)
    assert ensure_prepared(default_model) == graph
    assert (weights.stat().st_ino, weights.stat().st_mtime_ns) == stamp
    assert graph.parent == prepared_dir(default_model)
    assert weights.stat().st_mode & 0o777 == 0o444


def test_racing_builders_share_one_copy(tmp_path: Path) -> None:
    model = import_default(ModelStore(tmp_path))
    results: list[Path] = []
    errors: list[BaseException] = []

    def build() -> None:
        try:
            results.append(ensure_prepared(model))
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert results == [prepared_dir(model) / "model.onnx"] * 2
    entries = sorted(p.name for p in (tmp_path / PREPARED_DIR).iterdir())
    assert entries == [prepared_dir(model).name]  # no staging directory left behind


def test_a_failed_copy_falls_back_to_the_artifact(
    default_model: StoredModel, monkeypatch: pytest.MonkeyPatch, eval_texts: tuple[str, ...]
) -> None:
    def refuse(model: StoredModel) -> Path:
        raise OSError("read-only file system")

    monkeypatch.setattr(onnx_backend, "ensure_prepared", refuse)
    backend = OnnxBackend.load(default_model)
    expected = OnnxBackend.load(default_model, mapped_weights=False)
    encoded = backend.encode_texts(eval_texts[:8])
    assert np.abs(backend.run(encoded) - expected.run(encoded)).max() <= 1e-6


_HOLDER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from headway.models.store import ModelStore
    from headway.worker.backends.onnx import OnnxBackend

    model = ModelStore(Path(sys.argv[1])).get(sys.argv[2])
    backend = OnnxBackend.load(model, mapped_weights=sys.argv[3] == "mapped")
    backend.run(backend.encode_texts(["a warm-up sentence"] * 8))
    print("ready", flush=True)
    sys.stdin.read()
    """
)


def _weights_pages(pid: int, weights: Path) -> tuple[int, int]:
    """(resident kB, of which shared with another process kB) of ``weights``'s mappings."""
    resident = shared = 0
    inside = False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
            inside = len(fields) >= 6 and fields[5] == str(weights)
        elif inside and fields[0] == "Rss:":
            resident += int(fields[1])
        elif inside and fields[0] in ("Shared_Clean:", "Shared_Dirty:"):
            shared += int(fields[1])
    return resident, shared


@linux_only
@pytest.mark.parametrize("mode", ["mapped", "heap"])
def test_two_processes_share_one_copy_of_the_weights(default_model: StoredModel, mode: str) -> None:
    weights = prepared_dir(default_model) / WEIGHTS_FILE
    ensure_prepared(default_model)
    args = [str(default_model.path.parent), default_model.version, mode]
    holders = [
        subprocess.Popen(
            [sys.executable, "-c", _HOLDER, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        for holder in holders:
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == "ready"
        pages = [_weights_pages(holder.pid, weights) for holder in holders]
    finally:
        for holder in holders:
            holder.communicate("")
    if mode == "heap":
        assert pages == [(0, 0), (0, 0)]  # nothing mapped: the weights are on each heap
        return
    for resident, shared in pages:
        assert resident >= 40 * 1024  # the embeddings and pre-packed MatMul weights
        assert shared >= 0.95 * resident
