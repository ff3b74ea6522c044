"""Two Redis instances from settings: what each client is given, what is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from headway.redis_client import RedisEndpoint, cache_endpoint, quota_endpoint, redact
from headway.redis_layout import UNREADABLE, layout_problem
from headway.settings import Settings, SettingsError, load_settings

QUOTA = "redis://quota.internal:6379/0"
CACHE = "redis://cache.internal:6379/0"


def test_one_url_is_the_quota_instance_and_the_cache_keeps_to_memory() -> None:
    settings = Settings(redis_url=QUOTA)
    assert quota_endpoint(settings) == RedisEndpoint(QUOTA)
    assert cache_endpoint(settings) is None


def test_the_cache_url_needs_the_quota_url() -> None:
    with pytest.raises(ValidationError, match=r"redis\.cache_url needs redis_url"):
        Settings(redis={"cache_url": CACHE})


@pytest.mark.parametrize(
    "cache_url",
    [
        "redis://quota.internal:6379/1",  # another database: eviction is per instance
        "redis://QUOTA.internal/5",  # the default port, another case
        "rediss://user:pw@quota.internal:6379/2",
    ],
)
def test_the_cache_on_the_quota_server_is_refused_whatever_the_database(cache_url: str) -> None:
    with pytest.raises(ValidationError, match="needs a Redis server of its own"):
        Settings(redis_url=QUOTA, redis={"cache_url": cache_url})


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADWAY_REDIS_URL", QUOTA)
    monkeypatch.setenv("HEADWAY_REDIS__CACHE_URL", CACHE)
    monkeypatch.setenv("HEADWAY_REDIS__QUOTA__USERNAME", "gateway")
    monkeypatch.setenv("HEADWAY_REDIS__QUOTA__PASSWORD", "s3cret-quota")
    monkeypatch.setenv("HEADWAY_REDIS__CACHE__PASSWORD", "s3cret-cache")
    settings = load_settings()
    assert quota_endpoint(settings) == RedisEndpoint(QUOTA, "gateway", "s3cret-quota")
    assert cache_endpoint(settings) == RedisEndpoint(CACHE, None, "s3cret-cache")


def test_the_url_in_a_file_and_its_credentials_in_the_environment_go_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checks across fields wait for the merge: each source alone would fail them."""
    config = tmp_path / "headway.toml"
    config.write_text(f'redis_url = "{QUOTA}"\n')
    monkeypatch.setenv("HEADWAY_REDIS__CACHE_URL", CACHE)
    monkeypatch.setenv("HEADWAY_REDIS__QUOTA__PASSWORD", "s3cret-quota")
    settings = load_settings(config_file=config)
    assert quota_endpoint(settings) == RedisEndpoint(QUOTA, None, "s3cret-quota")
    assert cache_endpoint(settings) == RedisEndpoint(CACHE)
    with pytest.raises(SettingsError, match="for redis_url, which is not set"):
        load_settings()  # the environment alone: no quota instance


def test_no_password_in_a_repr_of_the_settings_or_an_endpoint() -> None:
    settings = Settings(
        redis_url=QUOTA,
        redis={
            "cache_url": CACHE,
            "quota": {"password": "s3cret-q"},
            "cache": {"password": "s3cret-c"},
        },
    )
    endpoint = quota_endpoint(settings)
    assert endpoint is not None
    for text in (repr(settings), str(settings), repr(endpoint), repr(settings.redis)):
        assert "s3cret" not in text


def test_a_password_in_the_url_and_in_the_settings_is_refused() -> None:
    with pytest.raises(ValidationError, match="a password in the URL and in the settings"):
        Settings(redis_url="redis://:pw@quota.internal/0", redis={"quota": {"password": "pw"}})


def test_credentials_without_their_url_are_refused() -> None:
    with pytest.raises(ValidationError, match=r"redis\.cache_url, which is not set"):
        Settings(redis_url=QUOTA, redis={"cache": {"password": "pw"}})


def test_tls_files_need_rediss(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text("x")
    with pytest.raises(ValidationError, match="TLS files are set but the URL is not rediss"):
        Settings(redis_url=QUOTA, redis={"quota": {"tls_ca": ca}})


def test_tls_files_must_exist_and_come_in_pairs(tmp_path: Path) -> None:
    cert = tmp_path / "client.crt"
    cert.write_text("x")
    with pytest.raises(ValidationError, match="tls_cert and tls_key go together"):
        Settings(redis_url="rediss://q:6380/0", redis={"quota": {"tls_cert": cert}})
    with pytest.raises(ValidationError, match="is not a file"):
        Settings(redis_url="rediss://q:6380/0", redis={"quota": {"tls_ca": tmp_path / "nope"}})


def test_an_unknown_scheme_is_refused() -> None:
    with pytest.raises(ValidationError, match="redis://, rediss:// or unix://"):
        Settings(redis_url="http://quota.internal:6379")


def test_client_kwargs_carry_the_user_password_and_tls_files() -> None:
    endpoint = RedisEndpoint(
        "rediss://quota.internal:6380/0",
        "gateway",
        "pw",
        Path("/etc/redis/ca.crt"),
        Path("/etc/redis/client.crt"),
        Path("/etc/redis/client.key"),
    )
    assert endpoint.client_kwargs() == {
        "username": "gateway",
        "password": "pw",
        "ssl_cert_reqs": "required",
        "ssl_check_hostname": True,
        "ssl_ca_certs": "/etc/redis/ca.crt",
        "ssl_certfile": "/etc/redis/client.crt",
        "ssl_keyfile": "/etc/redis/client.key",
    }


def test_plain_redis_gets_no_tls_kwargs_and_rediss_verifies_the_server_anyway() -> None:
    assert RedisEndpoint("redis://q/0").client_kwargs() == {}
    assert RedisEndpoint("rediss://q/0").client_kwargs() == {
        "ssl_cert_reqs": "required",
        "ssl_check_hostname": True,
    }


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:hunter2@q:6379/0", "redis://:***@q:6379/0"),
        ("rediss://gw:hunter2@q/1", "rediss://gw:***@q/1"),
        ("redis://q:6379/0", "redis://q:6379/0"),
    ],
)
def test_redact_hides_the_password_of_a_url(url: str, shown: str) -> None:
    assert redact(url) == shown
    assert RedisEndpoint(url).redacted == shown


def test_only_noeviction_on_an_instance_of_its_own_is_safe_for_quotas() -> None:
    assert layout_problem("noeviction", "a", "b") is None
    assert layout_problem("noeviction", "a", None) is None  # the cache was not reachable
    for policy in ("allkeys-lru", "volatile-lru", "volatile-ttl", "allkeys-random"):
        problem = layout_problem(policy, "a", "b")
        assert problem is not None and policy in problem and "noeviction" in problem
    assert "same run_id" in (layout_problem("noeviction", "a", "a") or "")
    assert "does not tell" in (layout_problem(UNREADABLE, "a", None) or "")
