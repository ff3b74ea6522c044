"""Where the consumer reads usage events from: JetStream (shared mode) or the outboxes."""
