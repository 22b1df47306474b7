"""Live updates: websocket consumers and the outbox broadcaster."""
