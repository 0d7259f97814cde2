#!/usr/bin/env python3
"""cardmix-agent: the node agent of a Cardmix GPU/NPU host (Python standard library only).

It authenticates with the node token (`cmxn_…`), sends heartbeats with what it sees
(nvidia-smi / npu-smi), polls commands from /api/v1/agent/commands/ (under a lease it acknowledges before it starts one), runs
them and posts back what the node printed (text + exit code) — never a verdict; the platform parses and decides.
A journal in the state directory names the command running, so an agent restarted in the middle tells the
platform at once that it cannot say how it ended.

Runtimes: `docker` (containers with NVIDIA --gpus or Ascend /dev/davinci* devices) and `process`
(a local process stands in for the container: tests and demos).
"""
from __future__ import annotations

import argparse
import base64
import errno
import hashlib
import http.client
import json
import logging
import os
import re
import resource
import select
import shlex
import shutil
import signal
import socket
import ssl
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

VERSION = "1.4.0"
OUTPUT_HEAD = OUTPUT_TAIL = 128 * 1024  # upload at most 256 KiB per command: the head and the tail
NVIDIA_QUERY = "index,name,uuid,memory.total,driver_version,temperature.gpu,utilization.gpu"
# Ascend device nodes every NPU container needs besides its /dev/davinciN cards.
ASCEND_CONTROL_DEVICES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
# Driver files the Ascend runtime expects inside the container (read-only bind mounts, when present).
ASCEND_MOUNTS = ("/usr/local/Ascend/driver", "/usr/local/dcmi", "/usr/local/bin/npu-smi",
                 "/etc/ascend_install.info", "/usr/local/Ascend/add-ons")
EXIT_TIMEOUT = 124
EXIT_NOT_FOUND = 127
EXIT_RESTARTED = 75  # EX_TEMPFAIL: the agent restarted while the command ran (how it ended is unknown), or
# did not run one whose start the platform may have recorded
# Each program a command runs carries the command's id in its environment (inherited by whatever it starts), so an
# agent restarted after dying mid-command finds what that command left running (in sessions of their own, they
# outlive the agent) and stops it: a readiness test's all_reduce_perf must not hold the cards into the next one.
COMMAND_ENV = "CARDMIX_AGENT_COMMAND"
_running = threading.local()  # .command_id: the command this thread runs (the command loop's; never heartbeats')
# After a program ends (or is killed): how long to wait for the rest of its output. A helper that left its
# process group (setsid, a daemon) may hold the pipe open for ever; waiting for its EOF would hang the agent.
OUTPUT_GRACE_S = 2.0
# What a failed request to the platform raises: the network, TLS, a malformed HTTP answer, a bad JSON body.
TRANSIENT_ERRORS = (urllib.error.URLError, OSError, ValueError, http.client.HTTPException)
# Every agent-started container carries it, so a wipe finds them all, even one the state dir forgot.
INSTANCE_LABEL = "cardmix.instance"
# The node port a container publishes its sshd on: a prepare finds an earlier container still holding it.
PORT_LABEL = "cardmix.ssh_port"
# Bare metal: the operator's own authorized_keys, kept in the state dir while a tenant's keys are in its place,
# and the mark a bare-metal instance's state dir gets when this agent saved it (an older agent's did not).
ORIGINAL_KEYS_DIR = "original-authorized-keys"
KEYS_MARKER = "keys-target"
# Bare metal: the deploy boot's kernel command line carries a one-time enrollment secret (`cardmix.enroll=cmxe_…`,
# put there by the platform through the BMC / boot server) that a freshly imaged node trades for its node token.
ENROLL_ARG = "cardmix.enroll="
DEFAULT_TOKEN_DIR = "/etc/cardmix-agent"
EXIT_CONFIG = 78

log = logging.getLogger("cardmix-agent")


# -- running programs --------------------------------------------------------------------------

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


def disk_in_use(disk: str, mounts: str) -> str | None:
    """Why `blkdiscard -f` (which skips its own exclusive open) must not touch `disk`, else None.

    Mounted under any of its names (a /dev/disk/by-id link, /dev/mapper/…: /proc/mounts says /dev/nvme1n1p1),
    or held open exclusively by the kernel (LVM, md, swap, a filesystem /proc/mounts names as /dev/root).
    """
    real = os.path.realpath(disk)
    for line in mounts.splitlines():
        source = line.split()[0] if line.strip() else ""
        if source.startswith(disk) or (source.startswith("/") and os.path.realpath(source).startswith(real)):
            return "it is mounted"
    try:
        os.close(os.open(real, os.O_RDONLY | os.O_EXCL))
    except OSError as exc:
        if exc.errno == errno.EBUSY:
            return "it is in use (mounted, or held by LVM, md or swap)"
    return None


def container_of(payload: dict) -> str:
    """The container's name: the platform's (one per group: an instance may hold two on one node), or the
    name a platform that sends none used."""
    return str(payload.get("name") or f"cardmix-{payload['instance_id']}")


def ssh_port_of(payload: dict) -> int | None:
    """The node port the platform chose for the container's sshd; None from a platform that sends none."""
    port = payload.get("ssh_port")
    return int(port) if port else None


# -- one cluster per instance -------------------------------------------------------------------------
# The platform sends a part of a multi-node or hybrid instance its view (`cluster` in the prepare payload): the
# network its node joins or sets up, its address, and the hostfile every part gets. A Docker network cannot span
# hosts: `vxlan` is a per-instance VXLAN over the fabric NICs enslaved to a per-instance bridge network on each
# node; `host` is the host's own network (the fabric NICs).
CLUSTER_HOSTFILE = "/etc/cardmix/hostfile"  # inside every part: `<address> slots=<cards>` per part (MPI/DeepSpeed)

# The readiness TCP probe, run in a part's network namespace (nsenter into a container's, or the host's): listen
# on the part's address and probe port, connect to every other part's (retrying while they come up), print one
# line per probe, and stay up until every other part has connected or the time is up.
PROBE = r"""
import json, socket, sys, threading, time
cfg = json.loads(sys.argv[1])
me, others = cfg["me"], cfg["others"]
deadline = time.monotonic() + float(cfg["timeout_s"])
def banner(part):
    return ("cardmix-probe %s part %s\n" % (cfg["instance_id"], part)).encode()
head = "part %s %s:%s" % (me["part"], me["address"], me["probe_port"])
inbound, ok = [0], True
try:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((me["address"], int(me["probe_port"])))
    srv.listen(64)
    srv.settimeout(0.2)
except OSError as exc:
    print("listen %s FAILED %s: %s" % (head, type(exc).__name__, exc), flush=True)
    srv, ok = None, False
def serve():
    while srv is not None and inbound[0] < len(others) and time.monotonic() < deadline:
        try:
            conn, _ = srv.accept()
        except OSError:
            continue
        with conn:
            conn.sendall(banner(me["part"]))
        inbound[0] += 1
listener = threading.Thread(target=serve, daemon=True)
listener.start()
for peer in others:
    line = "reach part %s (%s) -> part %s %s:%s " % (me["part"], me["address"], peer["part"], peer["address"],
                                                   peer["probe_port"])
    error = "no attempt"
    while True:
        started = time.monotonic()
        try:
            with socket.create_connection((peer["address"], int(peer["probe_port"])), timeout=2) as conn:
                conn.settimeout(5)
                got = conn.recv(200)
            if got == banner(peer["part"]):
                print(line + "ok %.2f ms" % ((time.monotonic() - started) * 1000), flush=True)
                break
            error = "answered %r, not part %s's probe" % (got[:60], peer["part"])
        except OSError as exc:
            error = "%s: %s" % (type(exc).__name__, exc)
        if time.monotonic() >= deadline:
            print(line + "FAILED " + error, flush=True)
            ok = False
            break
        time.sleep(0.2)
listener.join(max(0.0, deadline - time.monotonic()))
print("listen %s: %d of %d other part(s) connected" % (head, inbound[0], len(others)), flush=True)
sys.exit(0 if ok and inbound[0] >= len(others) else 1)
"""


def cluster_of(payload: dict) -> dict | None:
    """This part's view of its instance's cluster; None for a one-part instance (or a platform that sends none)."""
    cluster = payload.get("cluster")
    return cluster if isinstance(cluster, dict) and cluster.get("network") else None


def resolve(host: str) -> str:
    """An IPv4 address for a VXLAN endpoint (the platform may name a node by hostname)."""
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host  # `ip` then says what is wrong with it


def vxlan_up_argv(net: dict, *, ip: str = "ip", bridge: str = "bridge") -> list[list[str]]:
    """The commands that join the instance's bridge on this node to its VXLAN: the interface (VNI, UDP port, this
    node's fabric address and NIC), MTU, enslaved to the bridge, up, and one flood entry per other node. Peers and
    local must be addresses (see resolve)."""
    vx = net["vxlan"]
    add = [ip, "link", "add", vx, "type", "vxlan", "id", str(net["vni"]), "dstport", str(net["port"])]
    if net.get("local"):
        add += ["local", net["local"]]
    if net.get("device"):
        add += ["dev", net["device"]]
    add.append("nolearning")  # the flood entries below are the whole segment: no learning from stray packets
    cmds = [add, [ip, "link", "set", vx, "mtu", str(net["mtu"])], [ip, "link", "set", vx, "master", net["bridge"]],
            [ip, "link", "set", vx, "up"]]
    cmds += [[bridge, "fdb", "append", "00:00:00:00:00:00", "dev", vx, "dst", peer] for peer in net.get("peers", [])]
    return cmds


def vxlan_down_argv(net: dict, *, ip: str = "ip") -> list[list[str]]:
    """Remove the instance's VXLAN interface on this node (its flood entries go with it)."""
    return [[ip, "link", "del", net["vxlan"]]]


def cluster_network_create_argv(net: dict, instance_id: str, *, docker: str = "docker") -> list[str]:
    """The instance's bridge network on this node: its /24, this node's own gateway address (one L2 segment across
    the nodes: each node's bridge needs its own), the bridge named for the VXLAN to join, the VXLAN's MTU."""
    return [docker, "network", "create", "--driver", "bridge", "--subnet", net["subnet"], "--gateway", net["gateway"],
            "--label", f"{INSTANCE_LABEL}={instance_id}", "-o", f"com.docker.network.bridge.name={net['bridge']}",
            "-o", f"com.docker.network.driver.mtu={net['mtu']}", net["name"]]


def cluster_run_args(cluster: dict | None, port: int | None, hostfile: Path | None) -> list[str]:
    """`docker run` network options of a part: its instance's network at its own address (sshd published), or
    the host's network (its sshd on the published port itself: CARDMIX_SSH_PORT), and the hostfile mounted."""
    if not cluster:
        return []
    net = cluster["network"]
    if net["mode"] == "vxlan":
        args = ["--network", net["name"], "--ip", cluster["address"]]
        if port:
            args += ["-p", f"{port}:22"]
    else:
        args = ["--network", "host"]
    if port:
        args += ["--label", f"{PORT_LABEL}={port}"]
    if hostfile is not None:
        args += ["-v", f"{hostfile}:{CLUSTER_HOSTFILE}:ro"]
    return args


def rdma_run_args(devices: list[str]) -> list[str]:
    """RDMA for NCCL/HCCL over InfiniBand/RoCE: the verbs devices and the right to pin memory (memlock is
    already unlimited for every container)."""
    if not devices:
        return []
    args = []
    for device in devices:
        args += ["--device", device]
    return args + ["--cap-add", "IPC_LOCK"]


def scrub(value):
    """NUL → U+FFFD in every key and string of a JSON value (PostgreSQL's jsonb refuses NUL)."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {scrub(str(k)): scrub(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub(v) for v in value]
    return value


# -- files that must never be half-written --------------------------------------------------------

def fsync_dir(path: Path) -> None:
    """Make a rename or unlink in `path` durable (best effort: not every filesystem lets a directory sync)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def make_private_dir(path: Path) -> None:
    """Create `path` and its missing parents 0700 (as ~/.ssh must be); one that exists is left as it is."""
    missing = []
    while not path.is_dir():
        missing.append(path)
        path = path.parent
    for where in reversed(missing):
        where.mkdir(mode=0o700, exist_ok=True)
        where.chmod(0o700)  # whatever the umask


def atomic_put(target: Path, *, data: bytes | None = None, link: str | None = None, mode: int = 0o600,
               owner: tuple[int, int] | None = None) -> None:
    """Replace `target` with a file holding `data` (`mode`, `owner` where allowed) or a symlink to `link`:
    written next to it, synced, then renamed over it, so a crash leaves the old content or the new, never a
    part, and a symlink at `target` is replaced itself, never written through."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".cardmix", dir=target.parent)
    try:
        if link is not None:
            os.close(fd)
            os.unlink(tmp)
            os.symlink(link, tmp)
            if owner:
                try:
                    os.lchown(tmp, *owner)
                except OSError:
                    pass
        else:
            with os.fdopen(fd, "wb") as f:
                f.write(data or b"")
                f.flush()
                if owner:
                    try:
                        os.fchown(f.fileno(), *owner)
                    except OSError:  # not root: it stays this agent's
                        pass
                os.fchmod(f.fileno(), mode)  # after the chown, which may clear set-id bits
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    fsync_dir(target.parent)


# -- what the host looks like -------------------------------------------------------------------

def _int(value: str):
    value = value.strip().split(" ")[0]
    try:
        return int(float(value))
    except ValueError:
        return None


def parse_nvidia_query(text: str) -> list[dict]:
    """Rows of `nvidia-smi --query-gpu=… --format=csv,noheader` as dicts."""
    devices = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 7 or not cells[0].isdigit():
            continue
        devices.append({"index": int(cells[0]), "name": cells[1], "uuid": cells[2],
                        "memory_total_mib": _int(cells[3]), "driver_version": cells[4],
                        "temperature_c": _int(cells[5]), "utilization_pct": _int(cells[6])})
    return devices


def parse_npu_info(text: str) -> list[dict]:
    """NPU rows of `npu-smi info` (`| 0     910B3     | OK  | …`) as dicts (best effort)."""
    devices = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not cells or not cells[0]:
            continue
        first = cells[0].split()
        if len(first) >= 2 and first[0].isdigit() and not first[1].isdigit():
            devices.append({"index": int(first[0]), "name": " ".join(first[1:]), "uuid": "",
                            "memory_total_mib": None, "driver_version": "", "temperature_c": None,
                            "utilization_pct": None})
    return devices


# -- CPU and memory: a container's share of the host, in proportion to its cards (the platform computes it) --

CPU_PERIOD_US = 100_000  # cgroup v2 cpu.max period; the quota is the share of it


def host_size() -> dict:
    """{"cpus": logical CPUs, "memory_mib": RAM} of this host, reported for the platform to divide."""
    memory_mib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_mib = int(line.split()[1]) // 1024  # kB
                break
    except (OSError, ValueError, IndexError):
        pass
    return {"cpus": os.cpu_count(), "memory_mib": memory_mib}


def limits_of(payload: dict) -> tuple[int | None, int | None]:
    """(millicpus, memory MiB) the platform gave this container; None for what it did not (an older platform,
    a node of unknown size)."""
    limits = payload.get("limits") or {}

    def positive(value):
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
    return positive(limits.get("millicpus")), positive(limits.get("memory_mib"))


def cpus_text(millicpus: int) -> str:
    """28000 → "28", 13500 → "13.5" (docker's --cpus)."""
    return f"{millicpus // 1000}.{millicpus % 1000:03d}".rstrip("0").rstrip(".")


def limits_argv(payload: dict) -> list[str]:
    """`docker run` options for the container's share: --cpus, and --memory with no swap beyond it (swap would
    let it take the neighbours' RAM back through the page cache)."""
    millicpus, memory_mib = limits_of(payload)
    argv = ["--cpus", cpus_text(millicpus)] if millicpus else []
    if memory_mib:
        argv += ["--memory", f"{memory_mib}m", "--memory-swap", f"{memory_mib}m"]
    return argv


def cgroup2_root(setting: str = "auto") -> Path | None:
    """Where the process runtime may make cgroups: `setting` (a path, "none"), or the cgroup v2 mount when it
    offers the cpu and memory controllers and is writable (as root on a cgroup v2 host)."""
    if setting == "none":
        return None
    root = Path(setting) if setting != "auto" else None
    if root is None:
        try:
            mounts = Path("/proc/self/mounts").read_text().splitlines()
        except OSError:
            return None
        root = next((Path(m.split()[1]) for m in mounts if len(m.split()) > 2 and m.split()[2] == "cgroup2"), None)
    try:
        controllers = set((root / "cgroup.controllers").read_text().split()) if root else set()
    except OSError:
        return None
    return root if {"cpu", "memory"} <= controllers and os.access(root, os.W_OK) else None


def cgroup_remove(where: Path) -> str:
    """Remove the cgroup a process-runtime prepare made (empty once its process stopped; a killed one may take a
    moment to leave)."""
    recorded = where / "cgroup"
    if not recorded.exists():
        return ""
    group = Path(recorded.read_text().strip())
    for _ in range(50):
        try:
            group.rmdir()
            return ""
        except FileNotFoundError:
            return ""
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                return f"cgroup {group} not removed: {exc}\n"
            time.sleep(0.1)
    return f"cgroup {group} not removed: still busy\n"


class Agent:
    """Heartbeats in one thread, commands in the other."""

    result_backoff_s = (1.0, 30.0)  # first and longest pause between attempts to post a result or a start

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.server = args.server.rstrip("/")
        self.token = args.token
        self.state_dir = Path(args.state_dir)
        self.journal_dir = self.state_dir / "journal"  # one file per command started and not yet answered
        if not getattr(args, "report", False):  # a report only reads: it must work unprivileged
            # Only the agent reads its state (journal, the operator's saved keys): 0700, whatever it was.
            make_private_dir(self.state_dir)
            self.state_dir.chmod(0o700)
            (self.state_dir / "instances").mkdir(parents=True, exist_ok=True)
            self.journal_dir.mkdir(parents=True, exist_ok=True)
        self.stop = threading.Event()
        self.heartbeat_interval = args.heartbeat_interval or 15.0
        self.vendor = args.vendor
        self.ssl_context = ssl.create_default_context(cafile=args.ca_file) if args.ca_file else None

    # -- HTTP ------------------------------------------------------------------------------------

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

    # -- heartbeats ------------------------------------------------------------------------------

    def detect_vendor(self) -> str:
        if self.vendor != "auto":
            return self.vendor
        if shutil.which(self.args.nvidia_smi) or os.path.exists(self.args.nvidia_smi):
            return "nvidia"
        if shutil.which(self.args.npu_smi) or os.path.exists(self.args.npu_smi):
            return "huawei"
        return "nvidia"

    def report(self) -> dict:
        vendor = self.detect_vendor()
        errors: list[str] = []
        if vendor == "huawei":
            text, code = run([self.args.npu_smi, "info"], timeout=30)
            devices = parse_npu_info(text) if code == 0 else []
            versions = {"npu_driver": next((ln.split(":")[-1].strip().strip("|").strip() for ln in text.splitlines()
                                            if "Version" in ln), "")}
        else:
            text, code = run([self.args.nvidia_smi, f"--query-gpu={NVIDIA_QUERY}", "--format=csv,noheader"],
                             timeout=30)
            devices = parse_nvidia_query(text) if code == 0 else []
            versions = {"nvidia": devices[0]["driver_version"] if devices else ""}
        if code != 0:
            errors.append(f"{vendor} smi exit {code}: {text.strip()[-500:]}")
        return {"agent_version": VERSION, "hostname": self.args.hostname or socket.gethostname(),
                "runtime": self.args.runtime, "vendor": vendor, "devices": devices, "driver_versions": versions,
                "health": "ok" if code == 0 else "degraded", "smi_output": text[-60000:],
                "containers": self.instances(), "rdma_devices": self.rdma_devices(), "errors": errors,
                **host_size()}

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

    # -- commands --------------------------------------------------------------------------------

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
        _running.command_id = command["id"]  # its programs carry it (COMMAND_ENV)
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

    # -- the journal: commands started and not yet answered -------------------------------------------

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
                left = stop_leftovers(command_id)
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

    # -- instances (containers or stand-in processes) --------------------------------------------

    def instance_dir(self, name: str) -> Path:
        safe = "".join(ch for ch in name if ch.isalnum() or ch == "-")[:80] or "unnamed"
        return self.state_dir / "instances" / safe

    def instances(self) -> list[str]:
        where = self.state_dir / "instances"
        return sorted(p.name for p in where.iterdir() if p.is_dir()) if where.is_dir() else []

    def write_keys(self, target: Path, keys: list[str]) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("".join(k.strip() + "\n" for k in keys))
        target.chmod(0o600)

    def bare_metal_keys(self, where: Path) -> Path:
        """Where a bare-metal prepare puts the tenant's keys: root's authorized_keys (the process runtime: its
        state dir)."""
        return Path(self.args.authorized_keys) if self.args.runtime == "docker" else where / "authorized_keys"

    def saved_keys(self, target: Path) -> Path:
        """Where the operator's own `target` (what was there before the first bare-metal prepare) is kept until a
        release or wipe puts it back: one JSON file per target path, in the state dir."""
        digest = hashlib.sha256(os.path.abspath(target).encode()).hexdigest()[:24]
        return self.state_dir / ORIGINAL_KEYS_DIR / f"{digest}.json"

    def save_original_keys(self, target: Path) -> str:
        """Keep what `target` holds now (a file's bytes, mode and owner; a symlink's link; or that there was
        none), once: an existing saved copy is the operator's and stays (a retried or second prepare, an agent
        restart: the file holds a tenant's keys by then). Written atomically (0600) before the tenant's keys."""
        saved = self.saved_keys(target)
        if saved.exists():
            return ""
        record: dict = {"target": os.path.abspath(target), "kind": "missing"}
        older = [d.name for d in self.state_dir.glob("instances/*") if (d / "environment").exists()
                 and not (d / KEYS_MARKER).exists() and self.bare_metal_keys(d) == target]
        if older:  # an agent before 1.3.0 put these instances' keys there: they are no operator's to restore
            record["note"] = f"held the keys of {', '.join(older)} (prepared by an older agent)"
        else:
            try:
                st = os.lstat(target)
            except FileNotFoundError:
                st = None
            if st is not None and stat.S_ISLNK(st.st_mode):
                record.update(kind="symlink", link=os.readlink(target), uid=st.st_uid, gid=st.st_gid)
            elif st is not None and stat.S_ISREG(st.st_mode):
                fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW)
                with os.fdopen(fd, "rb") as f:
                    content = f.read()
                record.update(kind="file", content=base64.b64encode(content).decode(), mode=stat.S_IMODE(st.st_mode),
                              uid=st.st_uid, gid=st.st_gid)
            elif st is not None:
                raise OSError(errno.EINVAL, f"{target} is neither a file nor a symlink; not touching it")
        make_private_dir(saved.parent)
        atomic_put(saved, data=json.dumps(record).encode(), mode=0o600)
        if "note" in record:
            return f"{target} {record['note']}: a release removes it\n"
        return {"missing": f"no {target} before: a release removes it\n",
                "symlink": f"{target} (a symlink to {record.get('link')}) saved: a release puts it back\n",
                "file": f"the operator's {target} saved: a release puts it back\n"}[record["kind"]]

    def install_bare_metal_keys(self, where: Path, keys: list[str]) -> tuple[Path, str]:
        """Put the tenant's keys in root's authorized_keys, the operator's own saved first (see
        save_original_keys). The file is replaced atomically, never written through: a symlink there is replaced
        by the file (the operator's link and the file it names stay as they were) and comes back on release."""
        target = self.bare_metal_keys(where)
        make_private_dir(target.parent)
        said = self.save_original_keys(target)
        (where / KEYS_MARKER).write_text(os.path.abspath(target) + "\n")  # this agent saved what was there
        atomic_put(target, data="".join(k.strip() + "\n" for k in keys).encode(), mode=0o600)
        return target, said

    def restore_original_keys(self, saved: Path) -> str:
        """Put a saved original back in place of the tenant's keys (atomically, with its mode and owner where
        this agent may), then drop the saved copy: a crash in between leaves the original in place and the copy,
        which the next release or wipe puts back again; never the tenant's keys without the copy."""
        record = json.loads(saved.read_text())
        target = Path(record["target"])
        owner = (record["uid"], record["gid"]) if "uid" in record else None
        if record["kind"] in ("file", "symlink"):
            make_private_dir(target.parent)  # the tenant (root until now) may have removed it
        if record["kind"] == "file":
            atomic_put(target, data=base64.b64decode(record["content"]), mode=record["mode"], owner=owner)
            text = f"the operator's {target} restored\n"
        elif record["kind"] == "symlink":
            atomic_put(target, link=record["link"], owner=owner)
            text = f"the operator's {target} restored (a symlink to {record['link']})\n"
        else:
            try:
                os.unlink(target)
            except FileNotFoundError:
                pass
            fsync_dir(target.parent)
            text = f"{target} removed (there was none before the tenant's)\n"
        saved.unlink()
        fsync_dir(saved.parent)
        return text

    def revoke_bare_metal_keys(self, where: Path) -> str:
        """Take the tenant's keys out of root's authorized_keys: the tenant's root login ends with the instance
        (the file outlives the state dir, and a release or wipe that left it would leave the host theirs), and
        the operator's own file (saved by the first prepare) comes back."""
        target = self.bare_metal_keys(where)
        saved = self.saved_keys(target)
        if saved.exists():
            return f"ssh keys of {where.name} removed: " + self.restore_original_keys(saved)
        if (where / KEYS_MARKER).exists():  # another instance's release or a wipe restored it already
            return ""
        if not os.path.lexists(target):
            return ""
        # Prepared by an agent before 1.3.0, which kept no original: empty it, as that agent did.
        atomic_put(target, data=b"", mode=0o600)
        return f"ssh keys of {where.name} removed from {target}\n"

    def docker_run_argv(self, payload: dict, keys_file: Path) -> list[str]:
        """`docker run` for an instance: the cards, the image, SSH keys and environment.

        Tenants share a node: each container gets its own network (named as the container: containers on
        Docker's default bridge reach each other), its sshd published on the node port the platform chose
        (`ssh_port`), and its own IPC namespace (its own /dev/shm of --shm-size, where NCCL's intra-node
        transport and data loaders live), never the host's.
        """
        cards = [int(c) for c in payload.get("cards", [])]
        name, port = container_of(payload), ssh_port_of(payload)
        ascend = payload.get("collective") == "hccl" or payload.get("vendor") == "huawei"
        env = {str(k): str(v) for k, v in (payload.get("env") or {}).items()}
        # The platform names the host's cards; the container sees only its own, numbered from 0: --gpus makes
        # cards 4,5 its CUDA devices 0,1, and CANN numbers the mounted /dev/davinci4,5 as logical devices 0,1
        # (physical ids are the host's alone). The host's 4,5 inside would leave it no device at all.
        visible = "ASCEND_RT_VISIBLE_DEVICES" if ascend else "CUDA_VISIBLE_DEVICES"
        if cards and env.get(visible) == ",".join(str(c) for c in cards):
            env[visible] = ",".join(str(i) for i in range(len(cards)))
        rdma = self.rdma_devices()
        env.update(self.fabric_env(payload, rdma))
        # A platform that sends no port predates per-container ports: the host's network, as it expects.
        network = (["--network", name, "-p", f"{port}:22", "--label", f"{PORT_LABEL}={port}"] if port
                   else ["--network", "host"])
        cluster = cluster_of(payload)
        if cluster:  # a part of a multi-part instance: its instance's network instead of one of its own
            network = cluster_run_args(cluster, port, keys_file.parent / "hostfile")
            if cluster["network"]["mode"] != "vxlan" and port:
                env["CARDMIX_SSH_PORT"] = str(port)  # the host's network: the image's sshd listens there itself
        argv = [self.args.docker, "run", "-d", "--name", name,
                "--label", f"{INSTANCE_LABEL}={payload['instance_id']}", "--restart", "unless-stopped",
                *network, "--ipc", "private", "--shm-size", self.args.shm_size,
                "--ulimit", "memlock=-1", "-v", f"{keys_file}:/root/.ssh/authorized_keys:ro"]
        argv += rdma_run_args(rdma)
        if ascend:
            for card in cards:
                argv += ["--device", f"/dev/davinci{card}"]
            for device in ASCEND_CONTROL_DEVICES:
                argv += ["--device", device]
            for mount in ASCEND_MOUNTS:
                if os.path.exists(mount):
                    argv += ["-v", f"{mount}:{mount}:ro"]
        elif cards:
            argv += ["--gpus", '"device=' + ",".join(str(c) for c in cards) + '"']
        argv += limits_argv(payload)  # its CPU and memory share of the node
        for key, value in sorted(env.items()):
            argv += ["-e", f"{key}={value}"]
        argv.append(payload["image"])
        return argv

    def do_prepare(self, payload: dict):
        instance_id = payload["instance_id"]
        where = self.instance_dir(container_of(payload) if payload.get("kind") != "bare_metal" else instance_id)
        where.mkdir(parents=True, exist_ok=True)
        keys = list(payload.get("ssh_keys") or [])
        cards = ",".join(str(c) for c in payload.get("cards", []))
        cluster, rdma = cluster_of(payload), self.rdma_devices()
        joined = (self.cluster_said(cluster) if cluster else "") + (self.rdma_said(rdma) if self.fabric_env(payload, rdma)
                                                                    else "")
        part_meta = {**({"rdma_devices": rdma} if rdma else {}),
                     **({"cluster": {"part": cluster["part"], "address": cluster["address"],
                                     "network": cluster["network"]["mode"]}} if cluster else {})}
        if payload.get("kind") == "bare_metal":
            target, said = self.install_bare_metal_keys(where, keys)
            env = {**(payload.get("env") or {}), **self.fabric_env(payload, rdma)}
            if cluster:  # the host's network; the hostfile where the tenant's programs look for it
                hostfile = self.cluster_write(cluster, where)
                if self.args.runtime == "docker":
                    hostfile = Path(self.args.cluster_dir) / "hostfile"
                    hostfile.parent.mkdir(parents=True, exist_ok=True)
                    hostfile.write_text(str(cluster.get("hostfile", "")))
                env["CARDMIX_HOSTFILE"] = str(hostfile)
            (where / "environment").write_text("".join(f"{k}={v}\n" for k, v in sorted(env.items())))
            return (f"{said}bare metal ready for {instance_id}: {len(keys)} ssh key(s) in {target}, "
                    f"{len(env)} environment variable(s)\n{joined}", 0, {"kind": "bare_metal", **part_meta})
        self.write_keys(where / "authorized_keys", keys)
        if cluster:
            self.cluster_write(cluster, where)
        if self.args.runtime == "docker":
            text, code, meta = self.docker_prepare(payload, where / "authorized_keys")
            return text + (joined if code == 0 else ""), code, {**meta, **part_meta}
        # process runtime: a local process stands in for the container, with the instance's environment
        port = ssh_port_of(payload)
        env = {**os.environ, **{str(k): str(v) for k, v in (payload.get("env") or {}).items()},
               "CARDMIX_IMAGE": payload.get("image", ""), "CARDMIX_SSH_PORT": str(port or ""),
               **self.fabric_env(payload, rdma)}
        if cluster:  # nothing to join here: record what the docker runtime would set up; the hostfile is the mount's
            env["CARDMIX_HOSTFILE"] = str(where / "hostfile")
            (where / "network.json").write_text(json.dumps(
                {"mode": cluster["network"]["mode"], "commands": self.cluster_network_argv(cluster, instance_id),
                 "run_args": cluster_run_args(cluster, port, where / "hostfile") + rdma_run_args(rdma)}, indent=1))
        argv = shlex.split(self.args.process_command) if self.args.process_command else [
            sys.executable, "-c", "import time\nwhile True: time.sleep(3600)"]
        replaced = self.stop_process(where) if (where / "pid").exists() else ""  # a retried prepare
        if port:
            replaced += self.free_process_port(port, where)
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True, cwd=where)
        (where / "pid.start").write_text(process_identity(proc.pid) or "")  # before the pid: it vouches for it
        (where / "pid").write_text(str(proc.pid))
        if port:
            (where / "port").write_text(str(port))
        limited, limits = self.process_limits(proc.pid, where, payload)
        return (f"{replaced}{payload.get('image')}: process runtime\nprocess {proc.pid} started for {instance_id} "
                f"(devices {cards}, {len(keys)} ssh key(s), ssh port {port or '-'})\n{joined}{limited}", 0,
                {"pid": proc.pid, "ssh_port": port, **part_meta, **({"limits": limits} if limits else {})})

    def docker_prepare(self, payload: dict, keys_file: Path):
        """Start a group's container. Its meta's `ssh_port` is the port actually published (None: the host
        network, or nothing started): the platform stores it as the SSH endpoint, and an agent that ignores
        the port sends no such key."""
        name, port = container_of(payload), ssh_port_of(payload)
        meta = {"container": name, "ssh_port": None}
        # A retried prepare replaces what an earlier attempt started (same name: a second run would conflict).
        text, code = self.docker_rm(name)
        if code != 0:
            return text, code, meta
        freed = ""
        cluster = cluster_of(payload)
        if port:
            freed, code = self.docker_free_port(port, name)
            if code != 0:
                return freed, code, meta
            if not cluster:
                error, code = self.docker_network_create(name, str(payload["instance_id"]))
                if code != 0:
                    return freed + error, code, meta
        if cluster:
            said, code = self.cluster_network_up(cluster, str(payload["instance_id"]))
            freed += said
            if code != 0:
                return freed, code, meta
        argv = self.docker_run_argv(payload, keys_file)
        exposed = self.exposed_mounts(argv)
        if exposed:  # never: the token and the agent's state stay out of every container
            return (freed + f"cardmix-agent: refusing to start {name}: it would mount {', '.join(exposed)}, "
                    "the agent's token or state\n", EXIT_CONFIG, meta)
        text, code = run(argv, timeout=self.args.prepare_timeout)
        return freed + text, code, {**meta, "ssh_port": port if code == 0 else None}

    def protected_paths(self) -> list[Path]:
        """What no container may see: the token file, its directory, the state dir (and the usual token dir, even
        for an agent given its token another way)."""
        paths = [self.state_dir.resolve(), Path(DEFAULT_TOKEN_DIR)]
        token_file = getattr(self.args, "token_file", None)
        if token_file:
            paths += [Path(token_file).resolve(), Path(token_file).resolve().parent]
        return paths

    def exposed_mounts(self, argv: list[str]) -> list[str]:
        """The bind-mount sources in a `docker run` argv that would show a container a protected path: the path
        itself, anything inside it, or a directory above it. Only the files the agent writes for an instance to see
        (its authorized_keys and cluster hostfile, in its instance dir) are allowed out of the state dir, read-only."""
        sources = []
        for i, arg in enumerate(argv[:-1]):
            if arg in ("-v", "--volume"):
                sources.append(argv[i + 1].split(":", 1)[0])
            elif arg == "--mount":
                fields = dict(f.split("=", 1) for f in argv[i + 1].split(",") if "=" in f)
                sources.append(fields.get("source") or fields.get("src") or "")
            elif arg.startswith(("--volume=", "--mount=")):
                return [arg]  # not a form this agent writes: refuse rather than parse it
        protected = self.protected_paths()
        instances = (self.state_dir / "instances").resolve()
        exposed = []
        for source in sources:
            if not source.startswith("/"):
                continue  # a named volume, not a host path
            path = Path(source).resolve()
            if path.parent.parent == instances and path.name in ("authorized_keys", "hostfile"):
                continue
            if any(path == p or p.is_relative_to(path) or path.is_relative_to(p) for p in protected):
                exposed.append(source)
        return exposed

    def docker_rm(self, name: str) -> tuple[str, int]:
        """`docker rm -f` a container; one that does not exist counts as removed."""
        text, code = run([self.args.docker, "rm", "-f", name], timeout=120)
        if code != 0 and "No such container" in text:
            return "", 0
        return text, code

    def docker_free_port(self, port: int, name: str) -> tuple[str, int]:
        """Remove every other container labelled with `port` (and its network and state). The platform gives
        port BASE+k only to the group that holds card k, so another container still publishing it outlived its
        release (a failed rm, a release the platform stopped waiting for) and would fail every prepare on that
        card with "port is already allocated". → (what was removed, or why not; exit code)"""
        text, code = run([self.args.docker, "ps", "-a", "--filter", f"label={PORT_LABEL}={port}",
                          "--format", "{{.Names}}"], timeout=120)
        if code != 0:
            return f"docker ps failed (exit {code}): {text.strip()[-500:]}\n", code
        lines = []
        for stale in text.split():
            if stale == name:
                continue
            removed, code = self.docker_remove(stale)
            if code != 0:
                return "".join(lines) + f"could not remove {stale}, still on port {port}: {removed}", code
            shutil.rmtree(self.instance_dir(stale), ignore_errors=True)
            log.warning("removed stale container %s: it still published port %s", stale, port)
            lines.append(f"removed stale container {stale}: it still published port {port}\n")
        return "".join(lines), 0

    def docker_network_create(self, name: str, instance_id: str) -> tuple[str, int]:
        """The container's own network, labelled for wipe; one left by an earlier attempt will do.
        → ("" or why it failed, exit code)"""
        text, code = run([self.args.docker, "network", "create", "--label", f"{INSTANCE_LABEL}={instance_id}", name],
                         timeout=120)
        if code == 0 or (code == 1 and "already exists" in text):
            return "", 0
        return text, code

    def docker_network_rm(self, name: str) -> tuple[str, int]:
        """`docker network rm` (after its container: a network in use stays); a missing one counts as removed
        (a container on the host network has none)."""
        text, code = run([self.args.docker, "network", "rm", name], timeout=120)
        if code == 1 and re.search(r"No such network|network \S+ not found", text):
            return "", 0
        return text, code

    def docker_remove(self, name: str) -> tuple[str, int]:
        """Remove a container, then its network (one in use cannot go). → (docker's output: empty when the
        container did not exist, exit code)."""
        text, code = self.docker_rm(name)
        if code == 0:
            removed, code = self.docker_network_rm(name)
            text = text if code == 0 else removed
        return text, code

    def do_release(self, payload: dict):
        name = container_of(payload)
        where = self.instance_dir(name if payload.get("cards") else payload["instance_id"])
        legacy_name, legacy_dirs = self.legacy_of(payload)
        # Bare metal (no cards): the keys its prepare wrote go first, so a failed docker rm cannot keep them.
        revoked = self.revoke_bare_metal_keys(where) if not payload.get("cards") and where.is_dir() else ""
        if not payload.get("cards") and self.args.runtime == "docker" and (where / "cluster.json").exists():
            # The tenant's cluster hostfile on the host: the next tenant's instance writes its own.
            (Path(self.args.cluster_dir) / "hostfile").unlink(missing_ok=True)
        if self.args.runtime == "docker":
            text = revoked
            for container in filter(None, (name, legacy_name)):
                removed, code = self.docker_remove(container)
                if code != 0:  # keep the state: the heartbeat still lists it, and a retry or wipe removes it
                    return text + removed, code, {}
                if container == name:
                    text += f"{name} removed\n"
                elif removed:
                    text += f"{container} removed (started without a group name, by an older agent or platform)\n"
            if payload.get("cards"):
                removed, code = self.cluster_release(where, str(payload["instance_id"]))
                if code != 0:  # the state stays: a retried release (or the wipe) removes the network
                    return text + removed, code, {}
                text += removed
        else:
            text, code = revoked + self.stop_process(where), 0
            text += cgroup_remove(where)
            for old in legacy_dirs:
                if (old / "pid").exists():
                    text += self.stop_process(old)
        for gone in (where, *legacy_dirs):
            shutil.rmtree(gone, ignore_errors=True)
        return text, code, {}

    def legacy_of(self, payload: dict) -> tuple[str | None, list[Path]]:
        """What a release by group name must also remove: the instance's container named `cardmix-<id>`.

        Before 1.1.0 the agent (and still, for a platform that sends no name) ran one container per instance
        under that name, its state in instances/<id> (this agent: instances/cardmix-<id>). After an upgrade
        the platform releases it by its group's name; left alone, it would keep running on the freed cards.
        Exact names only: never another instance's. → (container name or None, its state dirs that exist)
        """
        if not payload.get("cards") or not payload.get("name"):
            return None, []  # bare metal, or a release by that very name
        instance_id = str(payload["instance_id"])
        legacy = f"cardmix-{instance_id}"
        if legacy == container_of(payload):
            return None, []
        dirs = [self.instance_dir(legacy), self.instance_dir(instance_id)]
        return legacy, [d for d in dirs if d.is_dir()]

    def process_limits(self, pid: int, where: Path, payload: dict) -> tuple[str, dict]:
        """The process runtime's --cpus / --memory: a cgroup v2 of its own (cpu.max, memory.max) where the host
        has writable cgroup v2 cpu and memory controllers; else RLIMIT_AS for memory, and CPU is not limited
        (RLIMIT_CPU caps CPU seconds, not a share). RLIMIT_AS is a poor stand-in: CUDA reserves far more address
        space than it uses, so real GPU hosts need cgroup v2 (or the docker runtime). Applied right after the
        start, so what the process did in its first instant is not counted."""
        millicpus, memory_mib = limits_of(payload)
        if not (millicpus or memory_mib):
            return "", {}
        root = cgroup2_root(getattr(self.args, "cgroup_root", "auto"))
        if root is not None:
            group = root / "cardmix" / where.name
            try:
                for parent in (root, root / "cardmix"):
                    parent.mkdir(exist_ok=True)
                    (parent / "cgroup.subtree_control").write_text("+cpu +memory")
                group.mkdir(exist_ok=True)
                if millicpus:
                    (group / "cpu.max").write_text(f"{millicpus * CPU_PERIOD_US // 1000} {CPU_PERIOD_US}")
                if memory_mib:
                    (group / "memory.max").write_text(str(memory_mib * 1024 * 1024))
                (group / "cgroup.procs").write_text(str(pid))
                (where / "cgroup").write_text(str(group))
                return (f"limits: cgroup {group}: cpu.max {millicpus or '-'} millicpus, memory.max "
                        f"{memory_mib or '-'} MiB\n", {"by": "cgroup", "cgroup": str(group), "millicpus": millicpus,
                                                     "memory_mib": memory_mib})
            except OSError as exc:
                log.warning("cgroup %s not usable (%s); falling back to rlimits", group, exc)
        said, limits = "", {"by": "rlimit", "millicpus": None, "memory_mib": None}
        if memory_mib:
            try:
                resource.prlimit(pid, resource.RLIMIT_AS, (memory_mib * 1024 * 1024,) * 2)
                said, limits["memory_mib"] = f"memory: RLIMIT_AS {memory_mib} MiB", memory_mib
            except OSError as exc:
                said = f"memory: not limited ({exc})"
        if millicpus:
            said += f"{'; ' if said else ''}cpu: not limited ({millicpus} millicpus asked; no writable cgroup v2)"
        return f"limits: no writable cgroup v2 cpu/memory controllers; {said}\n", limits

    def free_process_port(self, port: int, where: Path) -> str:
        """Stop every other instance's process given `port` (the process runtime's docker_free_port)."""
        lines = []
        for other in self.state_dir.glob("instances/*/port"):
            if other.parent == where or other.read_text().strip() != str(port):
                continue
            stopped = self.stop_process(other.parent).strip()
            shutil.rmtree(other.parent, ignore_errors=True)
            log.warning("stale %s still had port %s: %s", other.parent.name, port, stopped)
            lines.append(f"stale {other.parent.name} still had port {port}: {stopped}\n")
        return "".join(lines)

    def stop_process(self, where: Path) -> str:
        """Stop the process (group) a prepare started for `where`, if it still runs.

        Never another process given the same pid (after a reboot, or once ours ended): the pid counts only
        while its boot and start time are those recorded next to it (`pid.start`; for a pid file written before
        1.2.0, while the process still runs in the instance's directory, where the prepare started it). An
        empty or truncated pid file (a full disk) means nothing is known to run: said, not raised.
        """
        pid_file = where / "pid"
        if not pid_file.exists():
            return f"no process for {where.name}\n"
        try:
            pid = int(pid_file.read_text().strip())
            if pid <= 0:
                raise ValueError(f"pid {pid}")
        except (OSError, ValueError) as exc:
            return f"pid file of {where.name} unreadable ({type(exc).__name__}: {exc}): treated as no process\n"
        stranger = self.not_ours(pid, where)
        if stranger:
            return f"process {pid} is not the one started for {where.name} ({stranger}): left alone\n"
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            return f"process {pid} already gone\n"
        for _ in range(50):
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return f"process {pid} stopped\n"
            time.sleep(0.1)
        os.killpg(pid, signal.SIGKILL)
        return f"process {pid} killed\n"

    @staticmethod
    def not_ours(pid: int, where: Path) -> str | None:
        """Why the running process `pid` is not the one started for `where`, else None. A pid no process has
        is ours to signal: the kernel keeps it unused while our process group (its id) lives on."""
        now = process_identity(pid)
        if now is None:
            return None
        try:
            recorded = (where / "pid.start").read_text().strip()
        except OSError:
            recorded = ""
        if recorded:
            return None if recorded == now else "it started later, or in another boot"
        # None recorded (an agent before 1.2.0, a full disk): the prepare started its process in this directory.
        if os.path.realpath(f"/proc/{pid}/cwd") == os.path.realpath(where):
            return None
        return "it does not run in the instance's directory"

    # -- one cluster per instance --------------------------------------------------------------------

    def rdma_devices(self) -> list[str]:
        """The host's RDMA devices (/dev/infiniband/uverbs*, rdma_cm), sorted; none on a host without an HCA."""
        try:  # an Agent built on hand-made args (tests) has no option: the default place
            return sorted(str(p) for p in Path(getattr(self.args, "rdma_dir", "/dev/infiniband")).iterdir()
                          if not p.is_dir())
        except OSError:
            return []

    def fabric_env(self, payload: dict, rdma: list[str]) -> dict:
        """What only the node knows: NCCL may use InfiniBand/RoCE verbs only where their devices are, so it is told
        to use sockets where there are none (not left to fail over at the first collective)."""
        if payload.get("collective") == "hccl" or payload.get("vendor") == "huawei":
            return {}
        return {"NCCL_IB_DISABLE": "0" if rdma else "1"}

    def rdma_said(self, rdma: list[str]) -> str:
        where = getattr(self.args, "rdma_dir", "/dev/infiniband")
        return (f"RDMA: {len(rdma)} device(s) under {where}, IPC_LOCK\n" if rdma
                else f"no RDMA device under {where}: NCCL_IB_DISABLE=1\n")

    def cluster_write(self, cluster: dict, where: Path) -> Path:
        """The hostfile every part gets, and this part's view (cluster.json: a release reads its network)."""
        hostfile = where / "hostfile"
        hostfile.write_text(str(cluster.get("hostfile", "")))
        (where / "cluster.json").write_text(json.dumps(cluster, indent=1, sort_keys=True))
        return hostfile

    def cluster_network_argv(self, cluster: dict, instance_id: str) -> list[list[str]]:
        """The commands that give this node the part's network (the docker runtime runs them; the process runtime
        records them in network.json): none on the host's network."""
        net = cluster["network"]
        if net["mode"] != "vxlan":
            return []
        resolved = {**net, "local": resolve(net["local"]) if net.get("local") else "",
                    "peers": [resolve(p) for p in net.get("peers", [])]}
        return [cluster_network_create_argv(resolved, instance_id, docker=self.args.docker),
                *vxlan_up_argv(resolved, ip=self.args.ip, bridge=self.args.bridge)]

    @staticmethod
    def cluster_said(cluster: dict) -> str:
        net, env = cluster["network"], cluster.get("env") or {}
        if net["mode"] == "vxlan":
            where = f"vxlan {net['vxlan']} (VNI {net['vni']}) on bridge network {net['name']} {net['subnet']}"
        else:
            where = "host network" + (f" on {net['device']}" if net.get("device") else "")
        return (f"cluster part {cluster['part']} of {len(cluster.get('parts') or [])}: {where}, address "
                f"{cluster['address']}; MASTER_ADDR {env.get('MASTER_ADDR')}:{env.get('MASTER_PORT')}, WORLD_SIZE "
                f"{env.get('WORLD_SIZE')}, NODE_RANK {env.get('NODE_RANK')}, hostfile {CLUSTER_HOSTFILE}\n")

    def cluster_network_up(self, cluster: dict, instance_id: str) -> tuple[str, int]:
        """Docker runtime: the instance's bridge network and VXLAN on this node. Idempotent (a second part on this
        node, or a retried prepare, finds them). A network of that name labelled for another instance outlived its
        release (its slot was given out again): it goes first, with what still runs on it."""
        net = cluster["network"]
        if net["mode"] != "vxlan":
            return "", 0
        said = ""
        owner, code = run([self.args.docker, "network", "inspect", "-f", "{{index .Labels \"" + INSTANCE_LABEL + "\"}}",
                           net["name"]], timeout=120)
        if code == 0 and owner.strip() != instance_id:
            text, code = self.cluster_network_remove(net, stale=True)
            if code != 0:
                return text, code
            said = f"removed stale cluster network {net['name']} of instance {owner.strip() or '?'}\n"
        for argv in self.cluster_network_argv(cluster, instance_id):
            text, code = run(argv, timeout=120)
            if code != 0 and not re.search(r"already exists|File exists", text):
                return said + f"{shlex.join(argv)} failed (exit {code}): {text.strip()[-500:]}\n", code
        return said, 0

    def cluster_network_remove(self, net: dict, *, stale: bool = False) -> tuple[str, int]:
        """The VXLAN interface, then the bridge network (and, for one that outlived its instance, its containers)."""
        if stale:
            text, code = run([self.args.docker, "ps", "-aq", "--filter", f"network={net['name']}"], timeout=120)
            ids = text.split() if code == 0 else []
            if ids:
                run([self.args.docker, "rm", "-f", *ids], timeout=300)
        for argv in vxlan_down_argv(net, ip=self.args.ip):
            text, code = run(argv, timeout=120)
            if code != 0 and not re.search(r"Cannot find device|does not exist", text):
                return f"{shlex.join(argv)} failed (exit {code}): {text.strip()[-300:]}\n", code
        return self.docker_network_rm(net["name"])

    def cluster_release(self, where: Path, instance_id: str) -> tuple[str, int]:
        """Docker runtime, after a part's container is gone: the last part of its instance on this node takes the
        instance's network with it."""
        try:
            net = json.loads((where / "cluster.json").read_text())["network"]
        except (OSError, ValueError, KeyError):
            return "", 0
        if net.get("mode") != "vxlan":
            return "", 0
        text, code = run([self.args.docker, "ps", "-aq", "--filter", f"label={INSTANCE_LABEL}={instance_id}"],
                         timeout=120)
        if code != 0:
            return f"docker ps failed (exit {code}): {text.strip()[-300:]}\n", code
        if text.split():
            return f"cluster network {net['name']} kept: other parts of {instance_id} still run here\n", 0
        removed, code = self.cluster_network_remove(net)
        return (removed or f"cluster network {net['name']} and {net['vxlan']} removed\n"), code

    def vxlan_remove_all(self) -> tuple[str, int]:
        """Wipe: every cluster VXLAN interface left on the node (their bridge networks went with the prune)."""
        text, code = run([self.args.ip, "-o", "link", "show", "type", "vxlan"], timeout=60)
        if code != 0:
            return f"ip link show failed (exit {code}): {text.strip()[-300:]}\n", code
        names = re.findall(r"^\d+:\s+(cmxvx\d+)[@:]", text, flags=re.M)
        for name in names:
            out, code = run([self.args.ip, "link", "del", name], timeout=60)
            if code != 0:
                return f"ip link del {name} failed: {out.strip()[-300:]}\n", code
        return f"removed {len(names)} cluster vxlan interface(s)\n", 0

    def do_reachability(self, payload: dict):
        """Each of this node's parts listens on its probe port and connects to every other part's (PROBE), all at
        once: the other nodes' agents run theirs at the same time. A part in a container on its VXLAN network
        probes from inside the container's network namespace."""
        parts = {int(p["part"]): p for p in payload.get("parts") or []}
        timeout = float(payload.get("timeout_s") or 60.0)
        results: dict[int, tuple[str, int]] = {}

        def probe(local: dict) -> None:
            me = parts[int(local["part"])]
            cfg = {"instance_id": str(payload["instance_id"]), "me": me, "timeout_s": timeout,
                   "others": [p for k, p in sorted(parts.items()) if k != me["part"]]}
            argv = [sys.executable, "-c", PROBE, json.dumps(cfg)]
            if self.args.runtime == "docker" and payload.get("mode") == "vxlan" and local.get("name"):
                pid, code = run([self.args.docker, "inspect", "-f", "{{.State.Pid}}", local["name"]], timeout=60)
                if code != 0 or not pid.strip().isdigit() or pid.strip() == "0":
                    results[me["part"]] = (f"part {me['part']}: container {local['name']} is not running: "
                                           f"{pid.strip()[-300:]}\n", 1)
                    return
                argv = [self.args.nsenter, "-t", pid.strip(), "-n", "--", *argv]
            results[me["part"]] = run(argv, timeout=timeout + 10)

        threads = [threading.Thread(target=probe, args=(local,)) for local in payload.get("local") or []]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        text = "".join(results[k][0] for k in sorted(results))
        code = max((c for _, c in results.values()), default=2)
        return text or "no part of this cluster on this node\n", code, {"parts": sorted(results)}

    # -- tests -----------------------------------------------------------------------------------

    def tool_path(self, name: str) -> str:
        """The readiness binary: --readiness-bin is the program itself or a directory holding it."""
        configured = self.args.readiness_bin
        if configured and os.path.isdir(configured):
            return os.path.join(configured, name)
        return configured or name

    def do_readiness(self, payload: dict):
        argv = shlex.split(payload["command"])
        argv[0] = self.tool_path(argv[0])
        devices = ",".join(str(c) for c in payload.get("cards", []))
        if payload.get("collective") == "hccl":
            env = {"ASCEND_RT_VISIBLE_DEVICES": devices}
        else:  # the cards are nvidia-smi's indices (PCI order); CUDA's own default order is fastest first
            env = {"CUDA_VISIBLE_DEVICES": devices, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        text, code = run(argv, timeout=self.args.readiness_timeout, env=env)
        return text, code, {"argv": argv}

    def do_inter_node(self, payload: dict):
        per_node, hosts = int(payload["cards_per_node"]), payload["hosts"]
        ranks = per_node * len(hosts)
        host_list = ",".join(f"{h}:{per_node}" for h in hosts)
        hccl = payload.get("collective") == "hccl"
        if payload.get("cards"):  # each host runs its own cards (a container's, not its neighbours'): MPMD
            argv = [self.args.mpirun]
            for host, cards in zip(hosts, payload["cards"]):  # noqa: B905 (python 3.9)
                devices, n = ",".join(str(int(c)) for c in cards), str(len(cards))
                argv += [":"] if len(argv) > 1 else []
                if hccl:
                    argv += ["-n", n, "-host", host, "env", f"ASCEND_RT_VISIBLE_DEVICES={devices}",
                             self.tool_path("all_reduce_test"), "-b", "8G", "-e", "8G", "-p", n]
                else:
                    argv += ["-np", n, "-H", f"{host}:{n}", "env", f"CUDA_VISIBLE_DEVICES={devices}",
                             "CUDA_DEVICE_ORDER=PCI_BUS_ID", self.tool_path("all_reduce_perf"), "-b", "8G", "-e", "8G",
                             "-f", "2", "-g", "1", "-c", "1"]
        elif hccl:
            argv = [self.args.mpirun, "-n", str(ranks), "-hosts", host_list, self.tool_path("all_reduce_test"),
                    "-b", "8G", "-e", "8G", "-p", str(per_node)]
        else:
            argv = [self.args.mpirun, "-np", str(ranks), "-H", host_list, self.tool_path("all_reduce_perf"),
                    "-b", "8G", "-e", "8G", "-f", "2", "-g", "1", "-c", "1"]
        text, code = run(argv, timeout=self.args.readiness_timeout)
        return text, code, {"argv": argv}

    def do_health_check(self, payload: dict):
        card = str(int(payload["card"]))
        if payload.get("collective") == "hccl":
            argv = [self.args.npu_smi, "info", "-t", "health", "-i", card]
        else:
            argv = [self.args.nvidia_smi, "-q", "-i", card, "-d", "ECC,ROW_REMAPPER"]
        text, code = run(argv, timeout=60)
        return text, code, {"argv": argv}

    def do_topology(self, payload: dict):
        argv = ([self.args.npu_smi, "info", "-t", "topo"] if payload.get("collective") == "hccl"
                else [self.args.nvidia_smi, "topo", "-m"])
        text, code = run(argv, timeout=60)
        return text, code, {"argv": argv}

    def do_wipe(self, payload: dict):
        """Remove every instance, discard the configured scratch disks, reset the accelerators."""
        instances = sorted((self.state_dir / "instances").iterdir())
        lines, worst = self.wipe_keys(instances)
        if self.args.runtime == "docker":
            text, code = self.docker_rm_all()
            lines.append(text.strip())
            worst = worst or code
            if code == 0:
                text, code = self.docker_prune_networks()
                lines.append(text.strip())
                worst = worst or code
            if code == 0:
                text, code = self.vxlan_remove_all()
                lines.append(text.strip())
                worst = worst or code
            if code == 0:
                for where in instances:
                    shutil.rmtree(where, ignore_errors=True)
        else:
            for where in instances:
                lines.append(self.stop_process(where).strip())
                shutil.rmtree(where, ignore_errors=True)
        mounted = Path("/proc/mounts").read_text() if Path("/proc/mounts").exists() else ""
        for disk in self.args.wipe_disk:
            busy = disk_in_use(disk, mounted)
            if busy:
                lines.append(f"refusing to wipe {disk}: {busy}")
                worst = worst or 1
                continue
            text, code = run(["blkdiscard", "-f", disk], timeout=3600)
            lines.append(f"blkdiscard {disk}: {'ok' if code == 0 else text.strip()}")
            worst = worst or code
        if not self.args.wipe_disk:
            lines.append("no scratch disks configured (--wipe-disk); nothing to discard")
        if payload.get("collective") == "hccl":
            for device in parse_npu_info(run([self.args.npu_smi, "info"], timeout=60)[0]):
                text, code = run([self.args.npu_smi, "set", "-t", "reset", "-i", str(device["index"]), "-c", "0"],
                                 timeout=300)
                lines.append(text.strip())
                worst = worst or code
        else:
            text, code = run([self.args.nvidia_smi, "-r"], timeout=300)
            lines.append(text.strip())
            worst = worst or code
        return "\n".join(ln for ln in lines if ln) + "\n", worst, {}

    def wipe_keys(self, instances: list[Path]) -> tuple[list[str], int]:
        """Wipe: each bare-metal instance whose release never came loses its keys and the operator's come back,
        then any original still saved (for a target no instance dir names). → (lines, 1 if one could not be)"""
        lines, worst = [], 0

        def attempt(name: str, step, arg: Path) -> None:
            nonlocal worst
            try:
                lines.append(step(arg).strip())
            except (OSError, ValueError, KeyError) as exc:  # the tenant's keys may still be there
                lines.append(f"ssh keys of {name} not restored: {type(exc).__name__}: {exc}")
                worst = 1
        for where in instances:
            if (where / "environment").exists():
                attempt(where.name, self.revoke_bare_metal_keys, where)
        for saved in sorted((self.state_dir / ORIGINAL_KEYS_DIR).glob("*.json")):  # what the revokes left
            attempt(saved.name, self.restore_original_keys, saved)
        return lines, worst

    def docker_rm_all(self) -> tuple[str, int]:
        """Remove every container carrying the instance label (also ones whose state dir is gone)."""
        text, code = run([self.args.docker, "ps", "-aq", "--filter", f"label={INSTANCE_LABEL}"], timeout=120)
        if code != 0:
            return f"docker ps failed (exit {code}): {text.strip()[-500:]}\n", code
        ids = [word for word in text.split() if re.fullmatch(r"[0-9a-f]{12,64}", word)]
        if not ids:
            return "no instance containers\n", 0
        text, code = run([self.args.docker, "rm", "-f", *ids], timeout=300)
        if code != 0:
            return f"docker rm failed (exit {code}): {text.strip()[-500:]}\n", code
        return f"removed {len(ids)} instance container(s)\n", 0

    def docker_prune_networks(self) -> tuple[str, int]:
        """Remove every network carrying the instance label (after the containers: one in use stays)."""
        text, code = run([self.args.docker, "network", "prune", "-f", "--filter", f"label={INSTANCE_LABEL}"],
                         timeout=120)
        if code != 0:
            return f"docker network prune failed (exit {code}): {text.strip()[-500:]}\n", code
        pruned = text.partition("Deleted Networks:")[2].split()  # nothing printed when none was removed
        return f"removed {len(pruned)} instance network(s)\n", 0

    # -- main --------------------------------------------------------------------------------------

    def serve(self) -> int:
        beat = threading.Thread(target=self.heartbeat_loop, name="heartbeat", daemon=True)
        beat.start()
        try:
            self.journal_recover()
            self.command_loop()
        finally:
            self.stop.set()
        return 0


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Cardmix node agent")
    p.add_argument("--report", action="store_true",
                   help="print the heartbeat this host would send (JSON) and exit: 0 healthy, 1 degraded; "
                        "needs no server or token")
    p.add_argument("--server", default=os.environ.get("CARDMIX_SERVER", ""),
                   help="platform URL, e.g. https://cardmix.example.com; default $CARDMIX_SERVER")
    p.add_argument("--token", default=os.environ.get("CARDMIX_AGENT_TOKEN", ""),
                   help="node token (cmxn_…); default $CARDMIX_AGENT_TOKEN")
    p.add_argument("--token-file", help="read the node token from this file (0600, the agent's own); an enrolling "
                                        "agent writes the token it gets there")
    p.add_argument("--kernel-cmdline", default="/proc/cmdline",
                   help="where the deploy boot's one-time enrollment secret (cardmix.enroll=cmxe_…) is looked for")
    p.add_argument("--enroll-retry-seconds", type=float, default=600.0,
                   help="keep retrying the enrollment this long through network errors and 5xx")
    p.add_argument("--runtime", choices=["docker", "process"], default="docker")
    p.add_argument("--vendor", choices=["auto", "nvidia", "huawei"], default="auto")
    p.add_argument("--readiness-bin", default="", help="all_reduce_perf / all_reduce_test, or their directory")
    p.add_argument("--readiness-timeout", type=float, default=1800.0)
    p.add_argument("--prepare-timeout", type=float, default=1800.0, help="docker run (image pull included)")
    p.add_argument("--nvidia-smi", default="nvidia-smi")
    p.add_argument("--npu-smi", default="npu-smi")
    p.add_argument("--mpirun", default="mpirun")
    p.add_argument("--docker", default="docker")
    p.add_argument("--ip", default="ip", help="iproute2's ip (cluster VXLAN interfaces)")
    p.add_argument("--bridge", default="bridge", help="iproute2's bridge (VXLAN flood entries)")
    p.add_argument("--nsenter", default="nsenter", help="runs the cluster probe in a container's network namespace")
    p.add_argument("--rdma-dir", default="/dev/infiniband", help="RDMA devices given to containers when present")
    p.add_argument("--cluster-dir", default="/etc/cardmix", help="bare metal: where the cluster hostfile goes")
    p.add_argument("--shm-size", default="32g",
                   help="each container's own /dev/shm (a cap, not a reservation: tmpfs pages are charged as used); "
                        "NCCL needs about 1g, the rest is for data loader workers")
    p.add_argument("--authorized-keys", default="/root/.ssh/authorized_keys", help="bare metal: where keys go")
    p.add_argument("--process-command", default="", help="process runtime: what stands in for the container")
    p.add_argument("--cgroup-root", default="auto",
                   help="process runtime: cgroup v2 mount for CPU and memory limits ('auto': found in "
                        "/proc/self/mounts; 'none': rlimits only)")
    p.add_argument("--wipe-disk", action="append", default=[], help="scratch disk to blkdiscard on wipe")
    p.add_argument("--state-dir", default="/var/lib/cardmix-agent")
    p.add_argument("--hostname", default="")
    p.add_argument("--heartbeat-interval", type=float, default=0.0, help="seconds; 0 = what the platform says")
    p.add_argument("--poll-interval", type=float, default=2.0)
    p.add_argument("--http-timeout", type=float, default=30.0)
    p.add_argument("--result-retry-seconds", type=float, default=900.0,
                   help="keep retrying a command's result this long (longer than the platform's command timeout)")
    p.add_argument("--start-retry-seconds", type=float, default=60.0,
                   help="keep retrying a command's start acknowledgement this long (its lease ends it sooner)")
    p.add_argument("--ca-file", default="", help="CA bundle for a private platform certificate")
    p.add_argument("--log-level", default="INFO")
    args = p.parse_args(argv)
    if args.report:
        return args
    if not args.server:
        p.error("the platform URL is required: --server or $CARDMIX_SERVER")
    args.enroll_secret = enroll_secret_of(args.kernel_cmdline)
    if args.token_file and os.path.exists(args.token_file):
        problem = token_file_check(Path(args.token_file))
        if problem:
            p.error(problem)
        args.token = Path(args.token_file).read_text().strip()
    if not args.token.startswith("cmxn_") and not args.enroll_secret:
        p.error("a node token (cmxn_…) is required: --token, --token-file or $CARDMIX_AGENT_TOKEN "
                f"(or an enrollment secret, {ENROLL_ARG}cmxe_…, on the deploy boot's kernel command line)")
    return args


def enroll_secret_of(cmdline_path: str) -> str | None:
    """The one-time enrollment secret on the kernel command line (the deploy boot's), if any."""
    try:
        words = Path(cmdline_path).read_text().split()
    except OSError:
        return None
    for word in words:
        if word.startswith(ENROLL_ARG) and word[len(ENROLL_ARG):].startswith("cmxe_"):
            return word[len(ENROLL_ARG):]
    return None


def token_file_check(path: Path) -> str | None:
    """The token file must be this agent's (root's, under systemd) and readable by nobody else: a looser mode is
    tightened to 0600; another owner is refused (→ the reason), since whoever owns it can swap the token."""
    st = path.stat()
    if st.st_uid != os.geteuid():
        return f"{path} is owned by uid {st.st_uid}, not by this agent's ({os.geteuid()}): refusing to use it"
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(path, 0o600)
        log.warning("%s was mode %o; now 0600", path, stat.S_IMODE(st.st_mode))
    return None


def enroll(args: argparse.Namespace) -> str | None:
    """Trade the deploy boot's one-time enrollment secret for a node token (POST /api/v1/agent/enroll/, no token
    sent), retried through network errors, 5xx, 408 and 429 for --enroll-retry-seconds; the token goes to
    --token-file (0600, replaced atomically). → the token, or None when refused (used already: an agent restarted
    in the same deploy boot; or expired): the token file then holds the one this boot got."""
    ssl_context = ssl.create_default_context(cafile=args.ca_file) if args.ca_file else None
    body = json.dumps({"secret": args.enroll_secret}).encode()
    give_up, pause = time.monotonic() + args.enroll_retry_seconds, 1.0
    while True:
        req = urllib.request.Request(f"{args.server.rstrip('/')}/api/v1/agent/enroll/", data=body, method="POST",
                                     headers={"Content-Type": "application/json",
                                              "User-Agent": f"cardmix-agent/{VERSION}"})
        try:
            with urllib.request.urlopen(req, timeout=args.http_timeout, context=ssl_context) as resp:
                token = str(json.loads(resp.read() or b"{}").get("token") or "")
            if token.startswith("cmxn_"):
                break
            status = "no token in the answer"
        except urllib.error.HTTPError as exc:
            status = exc.code
            if 400 <= exc.code < 500 and exc.code not in (408, 429):
                log.warning("enrollment refused (%s): the secret was used or expired", exc.code)
                return None
        except TRANSIENT_ERRORS as exc:
            status = f"{type(exc).__name__}: {exc}"
        if time.monotonic() >= give_up:
            log.error("enrollment failed: %s", status)
            return None
        log.warning("enrollment failed (%s); retrying", status)
        time.sleep(pause)
        pause = min(30.0, pause * 2)
    if args.token_file:
        target = Path(args.token_file)
        make_private_dir(target.parent)
        atomic_put(target, data=(token + "\n").encode(), mode=0o600)
    log.info("enrolled: node token %s… issued for this boot", token[:13])
    return token


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    agent = Agent(args)
    if args.report:
        report = agent.report()
        report.pop("smi_output")  # what was parsed is the point; the raw text is in the heartbeat
        print(json.dumps(report, indent=2))
        return 0 if report["health"] == "ok" and report["devices"] else 1

    def shutdown(signum, frame):
        agent.stop.set()

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    if args.enroll_secret:
        agent.token = enroll(args) or args.token
        if not agent.token.startswith("cmxn_"):
            log.error("no node token: the enrollment was refused and --token-file holds none")
            return EXIT_CONFIG
    log.info("cardmix-agent %s: server %s, runtime %s", VERSION, agent.server, args.runtime)
    return agent.serve()


if __name__ == "__main__":
    sys.exit(main())
