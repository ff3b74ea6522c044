"""The operator console in a real browser (headless Chromium) against real processes.

Gateway and two synthetic embed workers run as ``headway up`` starts them, but under a
supervisor in this process (``supervised``), which restarts nothing: a killed worker
stays dead. Under open-loop load ``embed-worker-1`` is SIGKILLed: the gateway's calls
to it are refused, it ejects it, and the console shows it so. Screenshots of every page
land in the test's tmp dir and in ``test-artifacts/console/`` at the repository root.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import threading
import time
from collections import Counter
from contextlib import closing
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, sync_playwright

from headway.catalog import SYNTHETIC_ALIAS
from headway.control.console.pages import PAGES
from headway.registry.open import open_registry
from headway.registry.sqlite import DEMO_ADMIN_KEY
from headway.settings import Settings, load_settings
from headway_tools.bench.served import supervised
from tests.e2e.conftest import wait_for

pytestmark = pytest.mark.e2e

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "console"
BROWSER_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]
TENANT = {"authorization": "Bearer demo-key-search-app"}
KILLED = "embed-worker-1"


def console_settings(data_dir: Path) -> Settings:
    return load_settings(
        flags={
            "data_dir": str(data_dir),
            "log_level": "warning",
            "gateway": {
                "port": 0,
                "quota": {"enabled": False},
                "health_interval_s": 0.5,
                "registry_poll_s": 0.2,
            },
            "worker": {
                "backend": "synthetic",
                "synthetic": {"call_ms": 20, "text_ms": 2},
                "registry_poll_s": 0.5,
            },
            "up": {"embed_replicas": 2, "rerank_replicas": 0},
            "observability": {"console": {"machine_cost_per_hour": 2.5}},
        }
    )


class OpenLoop:
    """Requests sent at a fixed rate from a thread, whatever the answers take."""

    def __init__(self, url: str, model: str, per_s: float, texts: int) -> None:
        self.url, self.model, self.per_s, self.texts = url, model, per_s, texts
        self.statuses: Counter[int] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def __enter__(self) -> OpenLoop:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive()

    async def _run(self) -> None:
        limits = httpx.Limits(max_connections=100)
        async with httpx.AsyncClient(base_url=self.url, timeout=10, limits=limits) as client:
            running: set[asyncio.Task[None]] = set()
            due, n = time.monotonic(), 0
            while not self._stop.is_set():
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)  # pacing the schedule, not waiting on a state
                    continue
                due += 1 / self.per_s
                n += 1
                if len(running) < 200:
                    task = asyncio.create_task(self._send(client, n))
                    running.add(task)
                    task.add_done_callback(running.discard)
            await asyncio.gather(*running)

    async def _send(self, client: httpx.AsyncClient, n: int) -> None:
        body = {"model": self.model, "input": [f"console {n} {k}" for k in range(self.texts)]}
        try:
            reply = await client.post("/v1/embeddings", json=body, headers=TENANT)
            self.statuses[reply.status_code] += 1
        except httpx.HTTPError:
            self.statuses[0] += 1


def shoot(page: Page, name: str, folder: Path) -> None:
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(path, ARTIFACTS / path.name)


def stat(page: Page, pool: str, name: str) -> float:
    text = page.locator(f'section[data-pool="{pool}"] [data-stat="{name}"] dd').text_content()
    return float(text or "nan")


def test_the_console_signs_in_shows_load_and_a_killed_replica_ejected(tmp_path):
    settings = console_settings(tmp_path / "data")
    with closing(open_registry(settings)) as registry:
        registry.seed_demo()
    shots = tmp_path / "screenshots"
    shots.mkdir()
    with supervised(settings) as supervisor, sync_playwright() as pw:
        url = supervisor.gateways[0].url
        worker = next(child for child in supervisor.children if child.name == KILLED)
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=BROWSER_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        console_errors: list[str] = []
        page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)

        # Every page, without a session, is the sign-in form.
        for name in ("", *PAGES):
            page.goto(f"{url}/console/{name}".rstrip("/"))
            assert page.url == f"{url}/console/login", name
        page.fill("#key", "demo-key-search-app")
        page.click("button[type=submit]")
        assert "cannot sign in" in (page.text_content(".error") or "")
        shoot(page, "login", shots)
        page.fill("#key", DEMO_ADMIN_KEY)
        page.click("button[type=submit]")
        page.wait_for_url(f"{url}/console/pools")

        # Admission under open-loop load: the chart moves, outstanding rises above 0.
        page.goto(f"{url}/console/admission")
        outstanding = page.locator('section[data-pool="embed"] path.series-outstanding')
        outstanding.wait_for(state="attached")
        idle = outstanding.get_attribute("d")
        with OpenLoop(url, SYNTHETIC_ALIAS, per_s=80, texts=4) as load:

            def moved() -> bool:
                peak = float(outstanding.get_attribute("data-peak") or 0)
                return (
                    outstanding.get_attribute("d") != idle
                    and peak > 0
                    and (stat(page, "embed", "outstanding") > 0)
                )

            wait_for(moved, timeout_s=20, what="the admission chart to move under load")
            wait_for(
                lambda: (outstanding.get_attribute("d") or "").count("L") >= 12,
                timeout_s=30,
                what="a dozen seconds of samples under load, for the screenshot",
            )
            shoot(page, "admission", shots)

            # A replica SIGKILLed under that load (nothing restarts it here): ejected.
            page.goto(f"{url}/console/pools")
            replica = page.locator(f'tr[data-replica="{worker.url}"]')
            replica.wait_for()
            assert replica.get_attribute("data-state") == "ready"
            os.kill(worker.process.pid, signal.SIGKILL)
            wait_for(
                lambda: replica.get_attribute("data-state") == "ejected",
                timeout_s=20,
                what="the killed replica to show as ejected",
            )
            assert replica.get_attribute("data-reason") == "unreachable"
            assert "unreachable" in (replica.text_content() or "")
            heading = page.locator('section[data-pool="embed"] h2').text_content() or ""
            assert "1 of 2 ready" in heading and "1 ejected now" in heading
            shoot(page, "pools-ejected", shots)
        assert load.statuses[200] > 0, load.statuses
        assert set(load.statuses) <= {200, 503}, load.statuses  # shed at most, never failed

        # A write: a tenant's quota, CSRF-protected, then seen in the audit log.
        page.goto(f"{url}/console/tenants")
        page.wait_for_selector('#quota-form option[value="support-bot"]', state="attached")
        page.select_option('#quota-form select[name="tenant"]', "support-bot")
        page.fill('#quota-form input[name="rate"]', "123")
        page.click("#quota-form button[type=submit]")
        wait_for(
            lambda: "123 texts/s" in (page.text_content(".notice") or ""),
            timeout_s=10,
            what="the quota change to be confirmed",
        )
        wait_for(
            lambda: page.locator('tr[data-tenant="support-bot"] td').nth(2).text_content() == "123",
            timeout_s=10,
            what="the tenants table to show the new quota",
        )
        shoot(page, "tenants", shots)
        page.goto(f"{url}/console/audit")
        update = page.locator('tr[data-action="tenant.update"]').first
        update.wait_for()
        assert "tenant:support-bot" in (update.text_content() or "")
        shoot(page, "audit", shots)

        page.goto(f"{url}/console/models")
        page.wait_for_selector("text=Output quality")
        shoot(page, "models", shots)
        page.goto(f"{url}/console/economics")
        page.wait_for_selector('section[data-pool="embed"] table')
        assert "3600" in (page.text_content(".formula") or "")
        shoot(page, "economics", shots)

        assert not [e for e in console_errors if "Content Security Policy" in e], console_errors
        browser.close()
    assert {p.name for p in shots.iterdir()} == {
        "login.png", "admission.png", "pools-ejected.png", "tenants.png", "audit.png",
        "models.png", "economics.png",
    }  # fmt: skip
