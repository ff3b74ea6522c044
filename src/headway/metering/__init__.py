"""The gateway's side of billing: one usage event per request, durable before the answer."""
