"""The throw-away PostgreSQL: restarts keep port and data, kill takes every process."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from headway_tools.testing.postgres_server import PostgresServer, PostgresServerError, find_binaries
from tests.billing.conftest import wait_for


def running(pid: int) -> bool:
    """Alive and not a zombie (a killed grandchild may wait for a reaper that never comes)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def owner_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid in /proc/{pid}/status")


def test_restarts_keep_the_port_and_every_committed_row() -> None:
    with PostgresServer() as server:
        port, url = server.port, server.url
        assert server.psql("SHOW fsync").strip() == "on"
        server.psql("CREATE TABLE kept (n int); INSERT INTO kept VALUES (1)")
        server.stop()
        assert not server.running
        server.start()
        server.psql("INSERT INTO kept VALUES (2)")
        server.kill()
        server.start()  # recovers from the WAL
        assert (server.port, server.url) == (port, url)
        assert server.psql("SELECT string_agg(n::text, ',' ORDER BY n) FROM kept").strip() == "1,2"
        pid, data_dir = server.pid, server.data_dir
    assert pid is not None and wait_for(lambda: not running(pid))
    assert not data_dir.exists()


def test_kill_takes_the_backends_with_the_postmaster() -> None:
    with PostgresServer(fsync=False) as server:
        postmaster = server.pid
        assert postmaster is not None
        children = Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text().split()
        assert children, "a running postgres has background processes"
        server.kill()
        assert not server.running
        assert wait_for(lambda: not any(running(int(pid)) for pid in [postmaster, *children]))
        with pytest.raises(PostgresServerError, match="psql failed"):
            server.psql("SELECT 1")


def test_the_server_runs_unprivileged_and_refuses_a_second_start(
    postgres_server: PostgresServer,
) -> None:
    assert postgres_server.pid is not None
    expected = pwd.getpwnam("nobody").pw_uid if os.geteuid() == 0 else os.geteuid()
    assert owner_of(postgres_server.pid) == expected
    assert postgres_server.psql("SHOW fsync").strip() == "off"
    with pytest.raises(PostgresServerError, match="already running"):
        postgres_server.start()


def test_missing_binaries_say_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(PostgresServerError, match="apt-get install postgresql"):
        find_binaries(f"{tmp_path}/*/bin")


def test_the_newest_installed_version_is_chosen(tmp_path: Path) -> None:
    for version in ("9", "15", "13"):
        bin_dir = tmp_path / version / "bin"
        bin_dir.mkdir(parents=True)
        for name in ("initdb", "postgres", "pg_isready", "psql"):
            (bin_dir / name).write_text("")
    (tmp_path / "16" / "bin").mkdir(parents=True)  # incomplete: ignored
    assert find_binaries(f"{tmp_path}/*/bin") == tmp_path / "15" / "bin"
