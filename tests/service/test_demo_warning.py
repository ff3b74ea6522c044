"""A gateway that starts while the README's demo keys work says so, loudly, once."""

import logging

from headway.registry.demo import DEMO_KEYS
from tests.service.conftest import make_stack


async def test_a_gateway_starting_with_live_demo_keys_warns_once_naming_them(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="headway.gateway.service")
    stack = await make_stack(tmp_path)  # seeds the demo tenants, starts the gateway
    try:
        lines = [r for r in caplog.records if "demo key" in r.getMessage()]
        assert len(lines) == 1 and lines[0].levelno == logging.WARNING
        assert all(key in lines[0].getMessage() for key in DEMO_KEYS)
    finally:
        await stack.close()
