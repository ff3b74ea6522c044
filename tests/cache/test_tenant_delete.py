"""``headway tenants delete`` forgets the tenant's Redis entries: its own scope, or its group's."""

from __future__ import annotations

from pathlib import Path

import redis
from typer.testing import CliRunner

from headway.cache.scopes import group_scope, tenant_scope
from headway.cli import app
from headway_tools.testing.redis_server import RedisServer

KEY_HEX = "ab" * 32


def name_of(scope: str) -> str:
    return f"headway:cache:{scope}:{KEY_HEX}"


def headway(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_deleting_a_tenant_drops_its_scope_and_its_groups_in_redis(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    config = tmp_path / "headway.toml"
    config.write_text(
        'redis_url = "redis://127.0.0.1:1/0"\n'  # the quota instance: not used here
        f'[redis]\ncache_url = "{redis_server.url}"\n'
        '[gateway.cache.shared_groups]\ncorp = ["alpha", "beta"]\n'
    )
    where = ["--config", str(config), "--data-dir", str(tmp_path / "data")]
    for tenant in ("alpha", "gamma", "delta"):
        headway("tenants", "add", tenant, *where)
    alpha, gamma = 1, 2  # their ids, in the order they were added
    client = redis.Redis.from_url(redis_server.url)
    scopes = [group_scope("corp"), tenant_scope(alpha), tenant_scope(gamma)]
    for scope in scopes:
        client.set(name_of(scope), b"\0\0\0\0")
    try:
        headway("tenants", "delete", "alpha", "--yes", *where)  # its group's, and any of its own
        assert client.keys("headway:cache:*") == [name_of(tenant_scope(gamma)).encode()]
        headway("tenants", "delete", "delta", "--yes", *where)  # nothing of its own, nothing else
        assert client.keys("headway:cache:*") == [name_of(tenant_scope(gamma)).encode()]
    finally:
        client.close()


def test_a_config_naming_the_global_scope_is_refused_with_what_to_do(tmp_path: Path) -> None:
    config = tmp_path / "headway.toml"
    config.write_text('[gateway.cache]\nscope = "global"\n')
    result = CliRunner().invoke(app, ["tenants", "list", "--config", str(config)])
    assert result.exit_code == 2
    assert "'global' cache scope was removed" in result.output
    assert "shared_groups" in result.output
