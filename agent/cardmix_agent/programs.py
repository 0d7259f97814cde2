"""Running programs: bounded output, timeouts, and finding what a command left running."""
from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
from pathlib import Path

from .constants import COMMAND_ENV, EXIT_NOT_FOUND, EXIT_TIMEOUT, OUTPUT_GRACE_S, OUTPUT_HEAD, OUTPUT_TAIL

_running = threading.local()  # .command_id: the command this thread runs (the command loop's; never heartbeats')


def clip(text: str) -> str:
    """Keep the head and the tail of a long output (the table and the footer matter most).

    NUL becomes U+FFFD: the platform stores text in PostgreSQL, which refuses NUL (the result would be lost).
    """
    text = text.replace("\x00", "\ufffd")
    if len(text) <= OUTPUT_HEAD + OUTPUT_TAIL:
        return text
    cut = len(text) - OUTPUT_HEAD - OUTPUT_TAIL
    return f"{text[:OUTPUT_HEAD]}\n[cardmix-agent: {cut} characters omitted]\n{text[-OUTPUT_TAIL:]}"


class OutputCapture:
    """Reads a pipe in a thread, keeping only its first OUTPUT_HEAD and last OUTPUT_TAIL bytes in memory."""

    def __init__(self, pipe):
        self.pipe, self.head, self.tail, self.omitted = pipe, bytearray(), bytearray(), 0
        self.eof, self.quit = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._read, name="output", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        fd = self.pipe.fileno()
        while not self.quit.is_set():
            if not select.select([fd], [], [], 0.1)[0]:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                self.eof.set()
                return
            room = OUTPUT_HEAD - len(self.head)
            if room > 0:
                self.head += chunk[:room]
                chunk = chunk[room:]
            self.tail += chunk
            if len(self.tail) > OUTPUT_TAIL:
                self.omitted += len(self.tail) - OUTPUT_TAIL
                del self.tail[:-OUTPUT_TAIL]

    def finish(self, grace: float) -> str:
        """Wait up to `grace` s for the end of the output, stop reading, and return what was read."""
        self.eof.wait(grace)
        self.quit.set()
        self.thread.join()
        self.pipe.close()
        if not self.omitted:
            return bytes(self.head + self.tail).decode(errors="replace")
        return (f"{self.head.decode(errors='replace')}\n[cardmix-agent: {self.omitted} bytes omitted]\n"
                f"{self.tail.decode(errors='replace')}")


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run(argv: list[str], *, timeout: float, env: dict | None = None) -> tuple[str, int]:
    """Run a program; (stdout+stderr, exit code). Timeout → 124, missing program → 127.

    Returns within about timeout + 2 × OUTPUT_GRACE_S whatever the program's children do; at most
    OUTPUT_HEAD + OUTPUT_TAIL bytes of output are kept.
    """
    full_env = {**os.environ, **(env or {})}
    command_id = getattr(_running, "command_id", None)
    if command_id:
        full_env[COMMAND_ENV] = str(command_id)
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=full_env, start_new_session=True)
    except FileNotFoundError:
        return f"cardmix-agent: {argv[0]}: command not found\n", EXIT_NOT_FOUND
    except PermissionError as exc:
        return f"cardmix-agent: {argv[0]}: {exc}\n", 126
    capture = OutputCapture(proc.stdout)
    note = ""
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _killpg(proc.pid)
        try:
            proc.wait(timeout=OUTPUT_GRACE_S)  # a process stuck in the kernel (D state) never dies
        except subprocess.TimeoutExpired:
            note = "cardmix-agent: the program did not die after SIGKILL\n"
        code, note = EXIT_TIMEOUT, f"\ncardmix-agent: killed after {timeout:g} s (timeout)\n{note}"
    text = capture.finish(OUTPUT_GRACE_S)
    if not capture.eof.is_set():  # leftovers of its process group still hold the pipe: the command is over
        _killpg(proc.pid)
    return text + note, code


def processes_of_command(command_id: str) -> list[int]:
    """The processes whose environment names `command_id` (see COMMAND_ENV; Linux /proc, readable as root or as
    the processes' own user): what a command's programs left running."""
    marker = f"{COMMAND_ENV}={command_id}".encode()
    found = []
    if not os.path.isdir("/proc"):  # not Linux: nothing to find
        return found
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    found.append(int(entry.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def stop_leftovers(command_id: str) -> int:
    """SIGKILL the process groups of whatever `command_id`'s programs left running (never the agent's own
    group). → how many processes were found."""
    pids = processes_of_command(command_id)
    for pid in pids:
        try:
            group = os.getpgid(pid)
        except ProcessLookupError:
            continue
        if group != os.getpgrp():
            _killpg(group)
    return len(pids)


def process_identity(pid: int) -> str | None:
    """What tells the process `pid` from a later one given the same pid: this boot and its start time (clock
    ticks since boot, /proc/<pid>/stat field 22). None when there is no such process (or /proc cannot say)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        stat = Path(f"/proc/{pid}/stat").read_text()
        return f"{boot} {stat[stat.rindex(')') + 2:].split()[19]}"
    except (OSError, ValueError, IndexError):
        return None
