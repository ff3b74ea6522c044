"""The ledger: every usage event once per request id, and hourly aggregates of the billable."""
