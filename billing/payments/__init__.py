"""Payments (SPEC §4): Stripe top-ups, webhook events applied exactly once, reconciliation, refunds."""
