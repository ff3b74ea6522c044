"""OpenAI-compatible batches: the stores, the durable work queue and the executor."""
