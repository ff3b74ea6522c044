import json

import pytest

from headway.settings import SettingsError, load_settings


def test_flags_beat_environment_beat_file_beat_defaults(tmp_path, monkeypatch):
    config = tmp_path / "headway.toml"
    config.write_text("[gateway]\nport = 7000\nchunk_texts = 8\n[worker]\nmax_batch_size = 4\n")
    monkeypatch.setenv("HEADWAY_GATEWAY__CHUNK_TEXTS", "12")
    monkeypatch.setenv("HEADWAY_WORKER__MAX_WAIT_MS", "7")
    settings = load_settings(config_file=config, flags={"gateway": {"port": 9000}})
    assert settings.gateway.port == 9000  # flag over file
    assert settings.gateway.chunk_texts == 12  # environment over file
    assert settings.worker.max_batch_size == 4  # file over default
    assert settings.worker.max_wait_ms == 7
    assert settings.worker.max_queue_texts == 1024  # default


def test_json_config_and_absolute_data_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"data_dir": "data", "up": {"embed_replicas": 3}}))
    settings = load_settings(config_file=config)
    assert settings.data_dir == tmp_path / "data"
    assert settings.up.embed_replicas == 3


def test_unknown_and_ill_typed_settings_are_refused(tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text("[gateway]\nprot = 1\n")
    with pytest.raises(SettingsError):
        load_settings(config_file=config)
    with pytest.raises(SettingsError):
        load_settings(flags={"worker": {"backend": "tensorflow"}})


def test_the_batch_fill_wait_is_adaptive_unless_set_fixed():
    assert load_settings(flags={}).worker.batch_wait == "adaptive"
    assert load_settings(flags={"worker": {"batch_wait": "fixed"}}).worker.batch_wait == "fixed"
    with pytest.raises(SettingsError):
        load_settings(flags={"worker": {"batch_wait": "sometimes"}})
