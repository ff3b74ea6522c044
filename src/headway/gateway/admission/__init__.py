"""Admission control: admit only the work the pool can finish within the latency budget."""
