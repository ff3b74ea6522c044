from collections.abc import AsyncIterator

import pytest

from tests.loadgen.servers import ScriptedServer


@pytest.fixture
async def scripted() -> AsyncIterator[ScriptedServer]:
    server = ScriptedServer()
    await server.start()
    yield server
    await server.stop()
