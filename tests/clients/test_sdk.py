"""The SDK: retries honouring Retry-After with one Idempotency-Key, typed errors, pages followed."""
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cardmix import Client, InsufficientCapacity, NotFound, ServiceUnavailable, ValidationError


class Flaky:
    """A loopback API that answers the scripted statuses in turn, then 201; records what it was sent."""

    def __init__(self, script):
        self.script, self.seen = list(script), []
        flaky = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self):
                length = int(self.headers.get("content-length") or 0)
                flaky.seen.append((self.command, self.path, dict(self.headers), self.rfile.read(length)))
                status, headers = flaky.script.pop(0) if flaky.script else (201, {})
                body = json.dumps({"id": "00000000-0000-0000-0000-000000000001", "name": "n", "state": "pending"}
                                  if status < 400 else {"error": {"code": "throttled" if status == 429 else
                                                                  "service_unavailable", "message": "later",
                                                                  "details": {}}}).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def flaky():
    made = []

    def make(script):
        made.append(Flaky(script))
        return made[-1]

    yield make
    for f in made:
        f.close()


def test_429_and_503_are_retried_after_retry_after_with_the_same_idempotency_key(flaky):
    api = flaky([(429, {"Retry-After": "3"}), (503, {"Retry-After": "1"}), (429, {})])
    waits = []
    inst = Client(token="cmx_x", base_url=api.url, sleep=waits.append).instances.create(
        name="n", items=[{"accelerator": "h100-sxm-80g", "count": 1}], image="img")
    assert inst.state == "pending"
    assert waits == [3.0, 1.0, 4.0]  # Retry-After, else exponential (2 ** attempt)
    keys = {seen[2].get("Idempotency-Key") for seen in api.seen}
    assert len(api.seen) == 4 and len(keys) == 1 and None not in keys
    assert all(s[2]["Authorization"] == "Bearer cmx_x" for s in api.seen)


def test_retries_end_with_the_typed_error(flaky):
    api = flaky([(503, {"Retry-After": "0"})] * 10)
    with pytest.raises(ServiceUnavailable) as exc:
        Client(token="t", base_url=api.url, max_retries=2, sleep=lambda s: None).request("GET", "ping/")
    assert exc.value.status == 503 and len(api.seen) == 3


def test_an_unreachable_platform_is_service_unavailable():
    with pytest.raises(ServiceUnavailable, match="Cannot reach"):
        Client(token="t", base_url="http://127.0.0.1:9", max_retries=1, sleep=lambda s: None).request("GET", "x/")


@pytest.mark.django_db(transaction=True)
def test_errors_pages_and_names_against_the_live_server(live_server, member_factory, catalog):
    from tests.factories.provisioning import InstanceFactory, funded, make_fleet
    from tests.factories.tenancy import make_token

    owner = funded(member_factory(role="owner"))
    _, secret = make_token(owner)
    make_fleet(h100=1)
    for n in range(7):
        InstanceFactory(organization=owner.organization, name=f"row-{n}", state="stopped")
    with Client(token=secret, base_url=live_server.url) as c:
        assert sorted(i.name for i in c.instances.list(page_size=3)) == [f"row-{n}" for n in range(7)]
        # Cursor pages (the default) and offset pages give the same rows in the same order.
        assert ([i.id for i in c.instances.list(page_size=3)]
                == [i.id for i in c.instances.list(page_size=3, cursor=False)])
        assert c.instances.get("row-4").name == "row-4"
        with pytest.raises(NotFound):
            c.instances.get("row-99")
        with pytest.raises(ValidationError) as exc:
            c.instances.create(name="bad", items=[{"accelerator": "h100-sxm-80g", "count": 99}], image="x")
        assert exc.value.status == 400 and exc.value.code == "validation_error" and exc.value.details
        c.instances.create(name="all", items=[{"accelerator": "h100-sxm-80g", "count": 8}],
                           image="pytorch-2.3-cuda12.3")
        with pytest.raises(InsufficientCapacity) as exc:
            c.instances.create(name="more", items=[{"accelerator": "h100-sxm-80g", "count": 1}],
                               image="pytorch-2.3-cuda12.3")
        assert exc.value.status == 409
        assert c.billing.balance().cash == "1000.000000"
