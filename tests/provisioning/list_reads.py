"""How many queries an instance list page takes, for the tests that hold that count constant."""
from django.db import connection
from django.test.utils import CaptureQueriesContext


def list_queries(client, path) -> tuple[int, dict]:
    """(the queries of a read of `path`, its body); a second read takes as many (nothing is kept between reads)."""
    counts = []
    for _ in range(2):
        with CaptureQueriesContext(connection) as ctx:
            r = client.get(path)
        assert r.status_code == 200, r.content[:300]
        counts.append(len(ctx.captured_queries))
    assert counts[0] == counts[1], counts
    return counts[1], r.json()
