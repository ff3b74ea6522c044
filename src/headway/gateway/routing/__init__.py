"""Where a chunk goes: power of two choices, a retry budget, ejection of failing replicas."""
