"""How many queries an instance list page takes, for the tests that hold that count constant."""
from django.db import connection
from django.test.utils import CaptureQueriesContext

# A cold read's write-back of the bodies it built (provisioning/body_cache.py): one statement, in a savepoint
# inside the test's transaction.
WRITE_BACK = 3


def list_queries(client, path) -> tuple[int, dict]:
    """(the queries of a warm read of `path`, its body). The cold read before it takes the same, or the
    write-back's more."""
    counts = []
    for _ in range(2):
        with CaptureQueriesContext(connection) as ctx:
            r = client.get(path)
        assert r.status_code == 200, r.content[:300]
        counts.append(len(ctx.captured_queries))
    cold, warm = counts
    assert cold - warm in (0, WRITE_BACK), counts
    return warm, r.json()
