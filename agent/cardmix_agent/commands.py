"""The command loop: claim one command under a lease, acknowledge its start, run it, post its result."""
from __future__ import annotations

import json
import threading
import time

from .client import scrub
from .constants import TRANSIENT_ERRORS, log
from .journal import not_run_result
from .programs import _running, clip


class CommandLoop:
    """Runs `do_<kind>` for each command handed out; heartbeats run in their own thread."""

    def command_loop(self) -> None:
        """Claim one command at a time (`limit=1`) under a lease (`lease=1`), acknowledge its start, run it, and
        poll again at once after it.

        A command the platform hands out under a lease runs only once its start is acknowledged (POST …/start/):
        one this agent never acknowledges (it died first, or never got the poll's answer) goes back to the queue
        when the lease runs out and is handed out again; one whose lease ran out first is refused (409) and not
        run, so it never runs twice. A platform without leases hands out commands without one, never twice:
        each one is run (and a platform before 1.2.0 ignores the limit: every command it hands out is run)."""
        while not self.stop.is_set():
            try:
                status, body = self.call("GET", "commands/?limit=1&lease=1")
                commands = body.get("results", []) if status == 200 else []
            except Exception as exc:  # a malformed answer is as transient as a refused connection
                if isinstance(exc, TRANSIENT_ERRORS):
                    log.warning("poll failed: %s: %s", type(exc).__name__, exc)
                else:
                    log.exception("poll failed")
                self.stop.wait(min(10.0, self.args.poll_interval * 5))
                continue
            ran = False
            for command in commands:
                try:
                    if isinstance(command, dict) and command.get("lease"):
                        # Asked to stop before it started: leave it, the lease runs out and it comes back.
                        if self.stop.is_set() or not self.begin(command):
                            continue
                    # Started (or handed out without a lease): run even when asked to stop, or it would wait
                    # out its deadline.
                    self.execute(command)
                    ran = True
                except Exception:
                    log.exception("command %s crashed", command.get("id") if isinstance(command, dict) else "?")
            if not ran:  # after a command the next may be queued already: no pause between them
                self.stop.wait(self.args.poll_interval)

    def begin(self, command: dict) -> bool:
        """Journal the command as starting, then tell the platform it starts now, under the lease it came with.
        → whether to run it.

        The acknowledgement is retried like a result (a repeat is answered the same) for up to
        --start-retry-seconds; a 404 (not ours), 409 (the lease ran out, or the platform stopped waiting) or another
        4xx means do not run it. The entry, written first, lets a restart answer a start that may have been accepted
        (journal_recover); a start that never got an answer is answered here. Both say "did not run" under the
        lease: the platform stores it if it recorded the start, else refuses it and hands the command out again."""
        command_id = command["id"]
        self.journal_write(command_id, {"id": command_id, "kind": command.get("kind"), "lease": command["lease"],
                                        "starting": time.time()})
        status, body = self.post_retrying(f"commands/{command_id}/start/", {"lease": command["lease"]},
                                          retry_s=self.args.start_retry_seconds, what=f"the start of {command_id}")
        if status == 200:
            return True
        log.warning("not running %s: its start answered %s: %s", command_id, status, body)
        if self.answered_for_good(status):  # refused: nothing to tell
            self.journal_forget(command_id)
        else:
            result = not_run_result(command.get("kind"), command["lease"],
                                    f"its start acknowledgement got no answer ({status})")
            status, _ = self.post_result(command_id, result)
            self.journal_settle(command_id, status, result)
        return False

    def execute(self, command: dict) -> None:
        kind, payload = command["kind"], command.get("payload") or {}
        if not self.journal_write(command["id"], {"id": command["id"], "kind": kind, "started": time.time()}):
            self.journal_forget(command["id"])  # a "starting" entry left would answer "did not run" after a crash
        started = time.monotonic()
        handler = getattr(self, f"do_{kind}", None)
        _running.command_id = self.command_marker(command["id"])  # its programs carry it (COMMAND_ENV)
        try:
            text, code, meta = handler(payload) if handler else (f"cardmix-agent: unknown command {kind}\n", 2, {})
        except Exception as exc:  # report, never die: the platform decides what to do
            log.exception("command %s failed", kind)
            text, code, meta = f"cardmix-agent: {kind} failed: {type(exc).__name__}: {exc}\n", 1, {}
        finally:
            _running.command_id = None
        result = {"exit_code": max(-255, min(255, int(code))), "output": clip(text),
                  "duration_s": round(time.monotonic() - started, 3), "meta": scrub(meta)}
        status, body = self.post_result(command["id"], result)
        # The platform cannot store this result (400), or its proxy refused a body that large (413: nginx's
        # default limit is 1 MiB, and 256 KiB of binary output is 1.5 MiB of \ufffd escapes as JSON): send the
        # exit code with why, not nothing.
        if status in (400, 413):
            result = {"exit_code": result["exit_code"], "duration_s": result["duration_s"], "meta": {},
                      "output": clip(f"cardmix-agent: the platform refused this command's output ({status}): "
                                     f"{json.dumps(body)[:2000]}\n")}
            status, body = self.post_result(command["id"], result)
        self.journal_settle(command["id"], status, result)

    def serve(self) -> int:
        beat = threading.Thread(target=self.heartbeat_loop, name="heartbeat", daemon=True)
        beat.start()
        try:
            self.journal_recover()
            self.command_loop()
        finally:
            self.stop.set()
        return 0
