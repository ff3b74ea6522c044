"""Flags > environment > config file > defaults, for every pair of sources, whatever
the values: one equal to its default still beats a lower source."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path
from typing import Any

import pytest

from headway.settings import resolve_settings

ORDER = ("flag", "env", "file", "default")
DEFAULT = 16  # gateway.chunk_texts


def given(
    source: str, value: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """What ``resolve_settings`` takes for ``source`` setting gateway.chunk_texts."""
    if source == "flag":
        return {"flags": {"gateway": {"chunk_texts": value}}}
    if source == "env":
        monkeypatch.setenv("HEADWAY_GATEWAY__CHUNK_TEXTS", str(value))
    elif source == "file":
        config = tmp_path / "headway.toml"
        config.write_text(f"[gateway]\nchunk_texts = {value}\n")
        return {"config_file": config}
    return {}


@pytest.mark.parametrize("high_value", [DEFAULT, 99], ids=["high-equals-default", "high-set"])
@pytest.mark.parametrize(("high", "low"), list(combinations(ORDER, 2)))
def test_the_higher_source_wins(
    high: str, low: str, high_value: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if high == "default":
        pytest.skip("the defaults are the lowest source")
    low_value = DEFAULT if low == "default" else 7
    kwargs = given(low, low_value, tmp_path, monkeypatch) | given(
        high, high_value, tmp_path, monkeypatch
    )
    resolved = resolve_settings(**kwargs)
    assert resolved.value.gateway.chunk_texts == high_value
    assert resolved.source_of(("gateway", "chunk_texts")).kind == high


def test_all_four_sources_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "headway.toml"
    config.write_text("[gateway]\nport = 7000\nchunk_texts = 8\n[worker]\nmax_batch_size = 4\n")
    monkeypatch.setenv("HEADWAY_GATEWAY__PORT", "8080")  # the default, over the file's
    resolved = resolve_settings(config_file=config, flags={"worker": {"max_batch_size": 32}})
    settings = resolved.value
    assert (settings.gateway.port, settings.gateway.chunk_texts) == (8080, 8)
    assert settings.worker.max_batch_size == 32  # the default, as a flag, over the file's
    assert settings.worker.max_wait_ms == 2.0
    assert str(resolved.source_of(("gateway", "port"))) == "env HEADWAY_GATEWAY__PORT"
    assert str(resolved.source_of(("gateway", "chunk_texts"))) == f"file {config}:3"
    assert str(resolved.source_of(("worker", "max_wait_ms"))) == "default"


def test_a_section_set_in_part_keeps_the_rest_of_its_defaults(tmp_path: Path) -> None:
    """``worker.edge`` defaults its per-client cap to the process cap: setting another of
    its fields must not reset that one to the class's default."""
    config = tmp_path / "headway.toml"
    config.write_text(
        "[worker.edge]\nmax_connections = 500\n[gateway.interactive]\nmax_ms = 90000\n"
    )
    settings = resolve_settings(config_file=config).value
    assert settings.worker.edge.max_connections == 500
    assert settings.worker.edge.max_connections_per_client == 10_000
    assert (settings.gateway.interactive.default_ms, settings.gateway.interactive.max_ms) == (
        10_000,
        90_000,
    )


def test_a_check_across_fields_sees_every_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "headway.toml"
    config.write_text("[tls]\npublic_cert = 'cert.pem'\n")
    (tmp_path / "cert.pem").touch()
    (tmp_path / "key.pem").touch()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HEADWAY_TLS__PUBLIC_KEY", "key.pem")
    assert resolve_settings(config_file=config).value.tls.public
