"""What a request that ended with an exception is owed back, and what it leaves for the
ledger: the one rule the quota stage and the usage meter both read.

    served                                    charged; one billable event (``served``)
    the client left (not an ``Exception``)    charged; no event from here
    the client's own mistake (a 4xx)          charged; no event: no work was done
    refused by admission (nothing was sent)   refunded; no event
    failed on our side (a 5xx, a bug)         refunded; a not-billable event
"""

from __future__ import annotations

from dataclasses import dataclass

from headway.errors import HeadwayError
from headway.gateway.stages.admit import AdmissionRefused


@dataclass(frozen=True, slots=True)
class Settlement:
    refund: bool
    """The texts charged go back to the tenant's bucket."""
    not_billable_event: bool
    """The work we did and gave back is recorded, for the operator, never for an invoice."""


KEPT = Settlement(refund=False, not_billable_event=False)
REFUSED = Settlement(refund=True, not_billable_event=False)
FAILED = Settlement(refund=True, not_billable_event=True)


def settlement(exc: BaseException | None) -> Settlement:
    """The settlement of a request whose work ended with ``exc`` (None: it did not fail)."""
    if not isinstance(exc, Exception):
        return KEPT
    if isinstance(exc, AdmissionRefused):
        return REFUSED
    if isinstance(exc, HeadwayError) and exc.status < 500:
        return KEPT
    return FAILED
