"""The public APIs' bodies as values: OpenAI's embeddings, Cohere's rerank (v1) and v2,
TEI's, decoded strictly and checked against the limits. Below both the gateway (which
turns them into work and shapes the answers) and the batch executor (which checks each
line's body as the gateway would)."""
