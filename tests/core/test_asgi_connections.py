"""The uvicorn web (config.asgi) runs each request's sync code in a thread of its own. With persistent per-thread
connections (CONN_MAX_AGE) it left one PostgreSQL connection open per request thread, until the server refused new
clients and requests answered 503 (bench.scale under load). It uses a bounded pool instead (DB_POOL_MAX per
process), and still answers every request of a burst far wider than the pool."""
import concurrent.futures
import threading
import time
import urllib.request

import pytest
from django.db import connection

from tests.conftest import AsgiServer

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]

APP_NAME = "cardmix-asgi-pool-test"


def _connections() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [APP_NAME])
        return cursor.fetchone()[0]


def test_a_burst_of_concurrent_requests_shares_a_bounded_pool():
    server = AsgiServer(extra_env={"DB_POOL_MAX": "3", "PGAPPNAME": APP_NAME}).start()
    seen, done = [], threading.Event()

    def sample():  # the server's connections while the burst runs (leaked ones go when their thread is collected)
        try:
            while not done.is_set():
                seen.append(_connections())
                time.sleep(0.05)
        finally:
            connection.close()

    def get(_):
        with urllib.request.urlopen(f"{server.url}/healthz", timeout=60) as response:
            return response.status

    sampler = threading.Thread(target=sample)
    try:
        sampler.start()
        with concurrent.futures.ThreadPoolExecutor(max_workers=24) as pool:
            statuses = list(pool.map(get, range(480)))
    finally:
        done.set()
        sampler.join()
        server.stop()
    assert statuses == [200] * 480
    assert 1 <= max(seen) <= 3, seen  # without the pool: one per request thread, 20 and more
