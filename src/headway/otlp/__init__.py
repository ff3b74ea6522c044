"""A process's spans sent to an OpenTelemetry collector: the exporter (OTLP/HTTP, JSON,
through the product's transport) and the process's tracing from its settings. Above
``transport`` and ``tracing`` (the spans themselves, which everything may import)."""
