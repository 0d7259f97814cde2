"""Fixtures of the storage tests."""
from tests.storage.s3_server import s3, s3_server  # noqa: F401  (moto on loopback)
