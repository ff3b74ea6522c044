"""Traces: W3C trace context in and out, spans recorded only when an OTLP endpoint is set.

``traceparent.py`` reads and writes the header; ``spans.py`` records spans in the
context of the request that runs them; ``otlp.py`` exports them over OTLP/HTTP.
"""
