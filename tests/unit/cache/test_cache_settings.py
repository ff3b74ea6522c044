"""gateway.cache settings: tenant scope by default, no global scope, groups that trust."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from headway.settings import CacheSettings, SettingsError, load_settings


def test_by_default_every_tenant_has_its_own_scope_and_none_shares() -> None:
    cache = load_settings().gateway.cache
    assert (cache.scope, cache.shared_groups) == ("tenant", {})
    assert cache.memory_scope_bytes < cache.memory_bytes


def test_a_config_naming_the_global_scope_fails_and_says_what_to_do(tmp_path) -> None:
    config = tmp_path / "headway.toml"
    config.write_text('[gateway.cache]\nscope = "global"\n')
    with pytest.raises(SettingsError, match=r"'global' cache scope was removed.*shared_groups"):
        load_settings(config_file=config)


def test_the_global_scope_is_refused_from_the_environment_too(monkeypatch) -> None:
    monkeypatch.setenv("HEADWAY_GATEWAY__CACHE__SCOPE", "global")
    with pytest.raises(SettingsError, match="'global' cache scope was removed"):
        load_settings()


def test_shared_groups_come_from_a_file_and_from_the_environment(tmp_path, monkeypatch) -> None:
    config = tmp_path / "headway.toml"
    config.write_text('[gateway.cache.shared_groups]\ncorp = ["search", "support"]\n')
    assert load_settings(config_file=config).gateway.cache.shared_groups == {
        "corp": ("search", "support")
    }
    monkeypatch.setenv("HEADWAY_GATEWAY__CACHE__SHARED_GROUPS", '{"lab": ["a", "b"]}')
    assert load_settings().gateway.cache.shared_groups == {"lab": ("a", "b")}


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        ({"a": ("x", "y"), "b": ("y",)}, "tenant 'y' is in shared groups 'a' and 'b'"),
        ({"a": ("x", "x")}, "tenant 'x' is in shared groups 'a' and 'a'"),
        ({"a": ()}, "names no tenant"),
        ({"a": ("",)}, "empty tenant"),
        ({"a:b": ("x",)}, "shared group name 'a:b'"),
        ({"": ("x",)}, "shared group name ''"),
    ],
)
def test_groups_that_overlap_or_are_ill_named_are_refused(
    groups: dict[str, tuple[str, ...]], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        CacheSettings(shared_groups=groups)
