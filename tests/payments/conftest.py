"""A real Stripe-compatible server (localstripe) on a free loopback port, and helpers to pay with it."""
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
WEBHOOK_PATH = "/api/v1/billing/stripe/webhook/"
TEST_CARD = {"number": "4242424242424242", "exp_month": 12, "exp_year": 2034, "cvc": "123"}
DECLINED_CARD = {**TEST_CARD, "number": "4000000000000341"}  # localstripe: charging declined


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def localstripe_url():
    """Start `localstripe --port N --from-scratch`; wait until it answers; stop it at the end."""
    port = _free_port()
    log_path = ROOT / "var" / f"localstripe-{os.getpid()}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "ab")
    proc = subprocess.Popen([str(ROOT / ".venv" / "bin" / "localstripe"), "--port", str(port), "--from-scratch"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while True:
        try:
            urllib.request.urlopen(f"{url}/js.stripe.com/v3/", timeout=1).read()
            break
        except (urllib.error.URLError, ConnectionError, OSError):
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"localstripe did not start: {log_path.read_text(errors='replace')[-2000:]}") from None
            time.sleep(0.1)
    yield url
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=10)
    log.close()


@pytest.fixture
def stripe_env(localstripe_url, settings):
    """Settings and stripe-python both pointed at localstripe, with a fresh webhook secret."""
    import stripe

    settings.STRIPE_API_KEY = "sk_test_cardmix_tests"
    settings.STRIPE_API_BASE = localstripe_url
    settings.STRIPE_WEBHOOK_SECRET = f"whsec_{uuid.uuid4().hex}"
    settings.TOPUP_MIN_UCNY = 1_000_000
    previous = (stripe.api_key, stripe.api_base)
    stripe.api_key, stripe.api_base = settings.STRIPE_API_KEY, localstripe_url
    yield settings
    stripe.api_key, stripe.api_base = previous


def register_webhook(localstripe_url: str, hook_id: str, url: str, secret: str) -> None:
    """localstripe's webhook registration: a form POST of url and secret (SPEC §4)."""
    body = urllib.parse.urlencode({"url": url, "secret": secret}).encode()
    urllib.request.urlopen(urllib.request.Request(f"{localstripe_url}/_config/webhooks/{hook_id}", data=body),
                           timeout=5).read()


@pytest.fixture
def webhook_to_live_server(stripe_env, live_server, localstripe_url):
    """Register the live test server's webhook endpoint with localstripe; returns the endpoint URL."""
    url = live_server.url + WEBHOOK_PATH
    register_webhook(localstripe_url, "cardmix", url, stripe_env.STRIPE_WEBHOOK_SECRET)
    return url


class Capture:
    """A loopback HTTP endpoint that records what localstripe delivers and answers `status`."""

    def __init__(self, status: int = 200):
        self.status = status
        self.requests: list[tuple[bytes, dict]] = []
        capture = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                capture.requests.append((body, dict(self.headers)))
                self.send_response(capture.status)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self, type_: str | None = None) -> list[tuple[bytes, dict]]:
        return [(b, h) for b, h in self.requests if type_ is None or json.loads(b)["type"] == type_]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def capture_factory():
    made: list[Capture] = []

    def make(status: int = 200) -> Capture:
        made.append(Capture(status))
        return made[-1]

    yield make
    for c in made:
        c.close()


def wait_for(predicate, timeout: float = 15, interval: float = 0.1, what: str = "condition"):
    """Poll until predicate() is truthy; returns its value."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


def pay(payment_intent_id: str, card: dict = TEST_CARD):
    """Attach a card PaymentMethod by updating the intent, then confirm it without arguments."""
    import stripe

    method = stripe.PaymentMethod.create(type="card", card=card)
    stripe.PaymentIntent.modify(payment_intent_id, payment_method=method.id)
    return stripe.PaymentIntent.retrieve(payment_intent_id).confirm()


def sign(payload: bytes | str, secret: str, timestamp: int | None = None) -> str:
    """A `Stripe-Signature` header computed like Stripe does (HMAC-SHA256 of "t.payload")."""
    import stripe

    text = payload.decode() if isinstance(payload, bytes) else payload
    return stripe.WebhookSignature.generate_signature_header(text, secret, timestamp=timestamp)


def post_raw(url: str, body: bytes, signature: str | None) -> tuple[int, bytes]:
    """POST a raw body to a URL the way Stripe would; (status, body)."""
    headers = {"Content-Type": "application/json; charset=utf-8"}
    if signature is not None:
        headers["Stripe-Signature"] = signature
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body, headers=headers), timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def assert_error(response, status, code):
    """The SPEC §5 error envelope with this status and code; returns the error object."""
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert isinstance(body["error"]["details"], dict)
    return body["error"]

