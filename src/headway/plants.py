"""Planted bugs, for the chaos checker's self-test only (``bench/chaos.py``).

A checker that has never caught anything proves little. Each plant below is one of the
bugs the exactly-once design exists to prevent, switched on in one process by the
``test_faults`` setting, which start-up refuses unless ``test_faults_allowed`` is set too
(``Settings._test_fault_only_in_tests``); the manifests and ``headway up`` set neither.

    drop_outbox_row    the gateway answers 200 but one usage event in ``DROP_EVERY``
                       never reaches its outbox: a request served and never billed
    ack_before_commit  the billing consumer acknowledges each batch as soon as it is
                       fetched, before the ledger commits it: a consumer that dies with
                       the batch uncommitted (Postgres away, a SIGKILL) loses it
    duplicate_line     the executor writes the first answered line of each output
                       file twice

Each is a wrapper around the real seam, beside it: ``metering/planted.py`` (``Metering``),
``billing/sources/planted.py`` (``EventSource``), ``batches/planted.py`` (the mover's line
results), so the product's own modules hold no test branch; each logs a warning at start
so a log shows the process was rigged.
"""

from __future__ import annotations

import logging
from typing import Literal

from headway.settings import Settings

log = logging.getLogger(__name__)

Plant = Literal["drop_outbox_row", "ack_before_commit", "duplicate_line"]
DROP_EVERY = 20
"""``drop_outbox_row`` drops the 20th, 40th, ... event a gateway records."""


def planted(settings: Settings, plant: Plant) -> bool:
    """Whether this process runs with ``plant`` (settings already refused it outside tests)."""
    if plant not in settings.test_faults:
        return False
    log.warning("PLANTED BUG %s is on in this process (test_faults): tests only", plant)
    return True
