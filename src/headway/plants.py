"""Planted bugs, for the chaos checker's self-test only (``bench/chaos.py``).

A checker that has never caught anything proves little. Each plant is one of the bugs the
exactly-once design exists to prevent: ``drop_outbox_row``, a request served and never billed
(one usage event in ``DROP_EVERY`` never reaches the outbox); ``ack_before_commit``, billing
acknowledging a batch before the ledger commits it, so a consumer that dies meanwhile loses it;
``duplicate_line``, the executor writing the first answered line of each output file twice.
The ``test_faults`` setting switches them on, in one process; start-up refuses it without
``test_faults_allowed`` (``Settings._test_fault_only_in_tests``), and the manifests and
``headway up`` set neither.

Each is a wrapper around the real seam, beside it (``metering/planted.py``,
``billing/sources/planted.py``, ``batches/planted.py``), so the product's own modules hold no
test branch; each logs a warning at start so a log shows the process was rigged.
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
