"""factory_boy factories, one module per app (tests/factories/<app>.py)."""
