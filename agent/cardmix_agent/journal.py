"""The journal: commands started and not yet answered, so a restarted agent answers them at once."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .constants import EXIT_RESTARTED, log
from .files import fsync_dir
from .programs import stop_leftovers


def not_run_result(kind, lease, why: str, *, restarted: bool = False) -> dict:
    """The answer for a command the agent never ran, though the platform may have recorded its start (exit 75, so
    the platform's step fails over at once instead of at the command's deadline). It names the lease it was
    handed under: delayed on the way, it must not land on a later hand-out that did run."""
    meta = {"not_run": True, **({"agent_restarted": True} if restarted else {})}
    return {"exit_code": EXIT_RESTARTED, "duration_s": 0.0, "meta": meta, "lease": lease,
            "output": f"cardmix-agent: did not run this command ({kind or 'unknown kind'}): {why}\n"}


def restarted_result(entry: dict, left: int) -> dict:
    """The answer for a command the agent died while running (its journal entry), `left` of its processes stopped."""
    since = entry.get("started", entry.get("starting"))
    started = isinstance(since, (int, float))
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since)) if started else "an unknown time"
    return {"exit_code": EXIT_RESTARTED, "meta": {"agent_restarted": True},
            "duration_s": round(max(0.0, time.time() - since), 3) if started else None,
            "output": f"cardmix-agent: the agent restarted while running this command "
                      f"({entry.get('kind', 'unknown kind')}, started {when}); it did not finish "
                      f"under the agent and its outcome is unknown\n"
                      + (f"cardmix-agent: stopped {left} process(es) it had left running\n" if left else "")}



class Journal:
    """`<state-dir>/journal/<id>.json` per command (the format stays: entries an older agent left are answered)."""

    def journal_path(self, command_id: str) -> Path:
        safe = "".join(ch for ch in str(command_id) if ch.isalnum() or ch == "-")[:80] or "unnamed"
        return self.journal_dir / f"{safe}.json"

    def journal_write(self, command_id: str, record: dict) -> bool:
        """Write (or replace) the command's entry, durably: after a crash or a power cut the entry is there,
        whole. Best effort: a command is run even when its entry cannot be written (a full disk). → written"""
        path = self.journal_path(command_id)
        tmp = path.with_name(path.name + ".tmp")
        try:
            with open(tmp, "w") as fh:
                fh.write(json.dumps(record))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
            fsync_dir(self.journal_dir)
            return True
        except OSError as exc:
            log.warning("could not journal command %s: %s", command_id, exc)
            return False

    def journal_settle(self, command_id: str, status, result: dict) -> None:
        """The result is stored, or refused for good (404: not ours; 409: the platform stopped waiting; another
        4xx): forget the command. Else (the platform unreachable, the agent stopping, or the token refused with
        401/403: rotated, so the agent is restarted with the new one) keep its result in the entry: the agent
        posts it when it starts again."""
        if self.answered_for_good(status):
            self.journal_forget(command_id)
            return
        entry = self.journal_read(self.journal_path(command_id))
        self.journal_write(command_id, {**entry, "id": command_id, "result": result})

    @staticmethod
    def answered_for_good(status) -> bool:
        """Whether the platform's answer ends the exchange: 200, or a 4xx that resending cannot change (a 401/403
        can: the token was rotated and the agent is restarted with the new one)."""
        return status is not None and (status == 200 or (400 <= status < 500 and status not in (401, 403, 408, 429)))

    def journal_forget(self, command_id: str) -> None:
        entry = self.journal_path(command_id)
        for path in (entry, entry.with_name(entry.name + ".tmp")):
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("could not remove the journal entry of %s: %s", command_id, exc)

    @staticmethod
    def journal_read(path: Path) -> dict:
        try:
            record = json.loads(path.read_text())
            return record if isinstance(record, dict) else {}
        except (OSError, ValueError):
            return {}

    def command_marker(self, command_id: str) -> str:
        """What a command's programs carry in COMMAND_ENV: its id and this agent's journal, so a restart stops only
        its own agent's leftovers (two agents on one host, as in tests, never stop each other's programs)."""
        return f"{command_id}@{self.journal_dir}"

    def journal_recover(self) -> None:
        """At startup, answer every command an earlier run of the agent started and never answered: it died while
        running it (SIGKILL, a crash, a reboot), so the platform stops waiting at once instead of until the
        command's deadline. Its stored result when it had one, else exit EXIT_RESTARTED saying so. The command is
        never run again: it may have done part of its work (a prepare the platform retries removes it first)."""
        if not self.journal_dir.is_dir():
            return
        entries: dict[str, dict] = {}
        for path in sorted(self.journal_dir.iterdir()):
            command_id = path.name.split(".")[0]  # <id>.json, or <id>.json.tmp a crash left mid-write
            if command_id:
                entries.setdefault(command_id, {}).update(self.journal_read(path))
        for command_id, entry in entries.items():
            result = entry.get("result")
            if not isinstance(result, dict):
                left = stop_leftovers(self.command_marker(command_id))
                if "starting" in entry and "started" not in entry and not left:
                    # Died while acknowledging its start (nothing of it runs): said, in case the start was accepted.
                    result = not_run_result(entry.get("kind"), entry.get("lease"),
                                            "the agent restarted before it ran this command", restarted=True)
                else:
                    result = restarted_result(entry, left)
            log.warning("command %s was running when the agent stopped: answering exit %s", command_id,
                        result.get("exit_code"))
            status, _ = self.post_result(command_id, result)
            self.journal_settle(command_id, status, result)
