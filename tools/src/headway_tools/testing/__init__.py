"""Throw-away servers for tests and benchmarks (started from installed binaries)."""
