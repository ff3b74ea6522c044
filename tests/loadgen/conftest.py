from collections.abc import AsyncIterator

import pytest

from tests.loadgen.servers import ScriptedServer, scripted_server


@pytest.fixture
async def scripted() -> AsyncIterator[ScriptedServer]:
    async with scripted_server() as server:
        yield server
