"""Provisioning writes: instances (create/stop/start/terminate), claims, steps, quotes, transitions."""
