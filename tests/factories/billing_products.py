"""Helpers for billing products: transfers posted at a chosen past time, package items."""
from contextlib import contextmanager
from unittest import mock

H100 = {"accelerator": "h100-sxm-80g", "cards": 2, "rate": 1_235_000}


@contextmanager
def posted_at(when):
    """Transfers and write-offs created inside get `created_at = when` (auto_now_add reads timezone.now)."""
    with mock.patch("django.utils.timezone.now", return_value=when):
        yield


def package_amount(*items) -> int:
    return 720 * sum(i["cards"] * i["rate"] for i in items)
