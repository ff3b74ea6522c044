"""The ``tls`` section: whole pairs of files that exist, or a clear error at start."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from headway.cli import app
from headway.settings import SettingsError, load_settings


@pytest.fixture
def files(tmp_path):
    for name in ("ca.crt", "worker.crt", "worker.key", "public.crt", "public.key"):
        (tmp_path / name).write_text("pem\n")
    return tmp_path


def test_tls_is_off_by_default():
    tls = load_settings().tls
    assert not tls.public and not tls.internal
    assert tls.reload_interval_s == 5.0


def test_the_files_come_from_the_environment_in_whole_sets(files, monkeypatch):
    monkeypatch.setenv("HEADWAY_TLS__CA", str(files / "ca.crt"))
    monkeypatch.setenv("HEADWAY_TLS__CERT", str(files / "worker.crt"))
    monkeypatch.setenv("HEADWAY_TLS__KEY", str(files / "worker.key"))
    monkeypatch.setenv("HEADWAY_TLS__RELOAD_INTERVAL_S", "0.5")
    tls = load_settings().tls
    assert tls.internal and not tls.public
    assert tls.cert == files / "worker.crt"
    assert tls.reload_interval_s == 0.5


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"public_cert": "public.crt"}, "public_cert and tls.public_key go together"),
        ({"public_key": "public.key"}, "public_cert and tls.public_key go together"),
        ({"ca": "ca.crt", "cert": "worker.crt"}, "tls.key not set"),
        ({"cert": "worker.crt", "key": "worker.key"}, "tls.ca not set"),
        ({"key": "worker.key"}, "tls.ca, tls.cert not set"),
    ],
)
def test_half_a_set_is_refused(files, given, message):
    with pytest.raises(SettingsError, match=message):
        load_settings(flags={"tls": {name: str(files / f) for name, f in given.items()}})


def test_a_file_that_is_not_there_is_named(files):
    missing = files / "gone.key"
    flags = {"public_cert": str(files / "public.crt"), "public_key": str(missing)}
    with pytest.raises(SettingsError, match=f"tls.public_key: {missing} is not a file"):
        load_settings(flags={"tls": flags})
    with pytest.raises(SettingsError, match="greater than 0"):
        load_settings(flags={"tls": {"reload_interval_s": 0}})


def test_a_process_refuses_to_start_on_invalid_tls_settings(files, tmp_path):
    config = tmp_path / "headway.toml"
    config.write_text(f'[tls]\nca = "{files / "ca.crt"}"\n')
    result = CliRunner().invoke(app, ["run", "worker", "--config", str(config)])
    assert result.exit_code == 2
    assert "error: " in result.output and "tls.cert, tls.key not set" in result.output


def test_a_process_refuses_to_start_on_tls_files_it_cannot_load(files, tmp_path, monkeypatch):
    monkeypatch.delenv("RAYON_NUM_THREADS", raising=False)  # the worker command sets it
    result = CliRunner().invoke(
        app,
        ["run", "worker", "--data-dir", str(tmp_path)],
        env={
            "HEADWAY_TLS__CA": str(files / "ca.crt"),
            "HEADWAY_TLS__CERT": str(files / "worker.crt"),
            "HEADWAY_TLS__KEY": str(files / "worker.key"),
        },
    )
    assert result.exit_code == 2
    assert "invalid TLS files" in result.output and "worker.crt" in result.output
