"""The platform client: authenticated calls, posts retried until they land, and the heartbeats."""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from .constants import TRANSIENT_ERRORS, VERSION, log


def scrub(value):
    """NUL → U+FFFD in every key and string of a JSON value (PostgreSQL's jsonb refuses NUL)."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {scrub(str(k)): scrub(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub(v) for v in value]
    return value



class PlatformClient:
    """The Agent's calls to /api/v1/agent/ (it sets server, token, ssl_context, args and stop)."""

    result_backoff_s = (1.0, 30.0)  # first and longest pause between attempts to post a result or a start

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.server}/api/v1/agent/{path}", data=data, method=method, headers={
            "Authorization": f"Bearer {self.token}", "Content-Type": "application/json",
            "User-Agent": f"cardmix-agent/{VERSION}"})
        try:
            with urllib.request.urlopen(req, timeout=self.args.http_timeout, context=self.ssl_context) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            try:
                payload = json.loads(exc.read() or b"{}")
            except ValueError:
                payload = {}
            return exc.code, payload

    def post_result(self, command_id: str, result: dict) -> tuple[int | None, dict]:
        """POST a result until it is stored, for up to --result-retry-seconds (the platform's command timeout is
        600 s); 404 (not ours), 409 (the platform stopped waiting) and another 4xx end it. → (status, body)."""
        return self.post_retrying(f"commands/{command_id}/result/", result, retry_s=self.args.result_retry_seconds,
                                  what=f"the result of {command_id}")

    def post_retrying(self, path: str, body: dict, *, retry_s: float, what: str) -> tuple[int | None, dict]:
        """POST until the platform answers 200 or a 4xx that resending the same body cannot change; transport
        errors, malformed answers, 5xx, 408 and 429 are retried with backoff for up to `retry_s`, or until the
        agent stops. → the last (status, body); status None when nothing answered."""
        give_up = time.monotonic() + retry_s
        (delay, longest), status, answer = self.result_backoff_s, None, {}
        while True:
            try:
                status, answer = self.call("POST", path, body)
                if status == 200 or (400 <= status < 500 and status not in (408, 429)):
                    return status, answer
                log.warning("%s answered %s: %s", what, status, answer)
            except Exception as exc:
                status, answer = None, {}
                if isinstance(exc, TRANSIENT_ERRORS):
                    log.warning("posting %s failed: %s: %s", what, type(exc).__name__, exc)
                else:
                    log.exception("posting %s failed", what)
            if self.stop.is_set() or time.monotonic() + delay > give_up:
                log.error("giving up on %s (last answer %s)", what, status)
                return status, answer
            self.stop.wait(delay)
            delay = min(longest, delay * 2)

    # -- heartbeats ------------------------------------------------------------------------------

    def heartbeat(self) -> bool:
        try:
            status, body = self.call("POST", "heartbeat/", scrub(self.report()))  # a NUL would be refused for ever
        except TRANSIENT_ERRORS as exc:
            log.warning("heartbeat failed: %s: %s", type(exc).__name__, exc)
            return False
        if status == 401:
            log.error("the platform refused the node token (401: rotated or revoked); issue a new one")
            return False
        if status != 200:
            log.warning("heartbeat answered %s: %s", status, body)
            return False
        if not self.args.heartbeat_interval:
            self.heartbeat_interval = float(body.get("heartbeat_interval_s") or 15.0)
        return True

    def heartbeat_loop(self) -> None:
        while not self.stop.is_set():
            try:
                self.heartbeat()
            except Exception:  # never let one bad answer end the heartbeats: the node would go unreachable
                log.exception("heartbeat crashed; retrying")
            self.stop.wait(self.heartbeat_interval)
