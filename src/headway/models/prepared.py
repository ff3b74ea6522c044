"""A prepared copy of an artifact: its weights in one file that every session maps.

Loading ``model.onnx`` the ordinary way copies every initializer onto the process's heap
and adds MLAS's pre-packed MatMul weights, so each worker holding a version pays for
them in private memory, even beside another worker holding the same version. The
prepared copy is ONNX Runtime's optimized graph with every initializer over
``EXTERNAL_MIN_BYTES``, and the pre-packed weights, in one external file at page-aligned
offsets (``session.save_external_prepacked_constant_initializers``): a session maps it,
so its pages are clean, file-backed and shared by every process through the page cache,
and the unpacked MatMul weights are never touched. (Turning pre-packing off would share
the weights too, at a real cost in throughput: docs/benchmarks.md, "Figures the design
rests on".)

The copy is derived, never part of the artifact (whose files and version stay as they
are): ``<store root>/.prepared/<version>-<runtime key>/``, the key hashing the ONNX
Runtime version and this CPU, which the optimized graph and packed layouts depend on.
It is built on first load in a short-lived child process (the build loads the artifact
the ordinary way, and the allocator keeps a heap that large), in a staging directory
renamed into place: a reader sees a whole copy or none, and racing builders both use
the first to land. It is made from the artifact the caller verified, inside the store's
root and trust boundary.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import onnxruntime as ort

from headway.models.errors import ModelPreparationError
from headway.models.store import StoredModel
from headway.storage.durable import fsync_dir

log = logging.getLogger(__name__)

PREPARED_DIR = ".prepared"
GRAPH_FILE = "model.onnx"
WEIGHTS_FILE = "weights.bin"
EXTERNAL_MIN_BYTES = 1024  # smaller tensors (scalars, shapes) stay inside the graph file
_ORT_ERROR_LOG_LEVEL = 3  # the "hardware specific optimizations" warning is why the key has the CPU


def runtime_key() -> str:
    """16 hex digits naming this ONNX Runtime build on this CPU."""
    digest = hashlib.sha256()
    digest.update(f"{ort.__version__}\0{platform.machine()}\0{_cpu_identity()}".encode())
    return digest.hexdigest()[:16]


def _cpu_identity() -> str:
    """The model name and feature flags of the first CPU (``/proc/cpuinfo``), as far as known."""
    try:
        lines = Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines()
    except OSError:
        return platform.processor()
    wanted = ("model name", "flags", "Features", "CPU part")
    first: dict[str, str] = {}
    for line in lines:
        key, _, value = line.partition(":")
        first.setdefault(key.strip(), value.strip())
    return "\n".join(first.get(key, "") for key in wanted)


def prepared_dir(model: StoredModel) -> Path:
    return model.path.parent / PREPARED_DIR / f"{model.version}-{runtime_key()}"


def ensure_prepared(model: StoredModel) -> Path:
    """The graph file of ``model``'s prepared copy, built first if there is none yet."""
    target = prepared_dir(model)
    if (target / GRAPH_FILE).is_file() and (target / WEIGHTS_FILE).is_file():
        return target / GRAPH_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=target.parent))
    try:
        _build_in_child(model.onnx_path, staging)
        try:
            staging.rename(target)
        except OSError:
            if not (target / GRAPH_FILE).is_file():
                raise
            log.info("prepared copy of %s built concurrently; using that one", model.version)
        else:
            fsync_dir(target.parent)
            log.info("prepared a mapped copy of %s in %s", model.version, target)
    finally:
        if staging.exists():  # the copy that lost the race, or a failed build
            staging.chmod(0o700)
            shutil.rmtree(staging, ignore_errors=True)
    return target / GRAPH_FILE


def _build_in_child(source: Path, into: Path) -> None:
    command = [sys.executable, "-m", __name__, str(source), str(into)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        detail = done.stderr.strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        raise ModelPreparationError(f"cannot prepare {source}: {detail[0]}")


def write_copy(source: Path, into: Path) -> None:
    """Save ``source``'s optimized graph and its weights file into the directory ``into``."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = _ORT_ERROR_LOG_LEVEL
    options.optimized_model_filepath = str(into / GRAPH_FILE)
    config = {
        "session.optimized_model_external_initializers_file_name": WEIGHTS_FILE,
        "session.optimized_model_external_initializers_min_size_in_bytes": str(EXTERNAL_MIN_BYTES),
        "session.save_external_prepacked_constant_initializers": "1",
    }
    for key, value in config.items():
        options.add_session_config_entry(key, value)
    ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
    for name in (GRAPH_FILE, WEIGHTS_FILE):
        # A graph with no initializer large enough writes no weights file: nothing to map,
        # and a missing file here refuses the copy (the caller loads the artifact itself).
        path = into / name
        with path.open("rb") as f:
            os.fsync(f.fileno())
        path.chmod(0o444)
    into.chmod(0o555)


if __name__ == "__main__":  # the child of ``_build_in_child``
    write_copy(Path(sys.argv[1]), Path(sys.argv[2]))
