"""Benchmarks that print ratios (placement, metering, API)."""
