"""Processes the hardware tests start — the node agent, sushy-emulator, munged and slurmctld — on free
loopback ports and in temporary directories; every one is stopped at teardown."""
import fcntl
import functools
import importlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(__file__).resolve().parent / "bin"
AGENT = ROOT / "build" / "cardmix-agent.pyz"  # what `make agent` builds from agent/cardmix_agent/, and a node runs
# The agent is stdlib-only: run it with the system interpreter, isolated from the virtualenv, to prove it.
AGENT_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


@functools.cache
def built_agent() -> Path:
    """`make agent` once per test process (make rebuilds the .pyz only when a source is newer), under a lock: the
    xdist workers share the file. → the .pyz the agent tests run."""
    AGENT.parent.mkdir(exist_ok=True)
    with open(AGENT.parent / ".agent-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run(["make", "-s", "agent"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return AGENT


def agent_package(module: str = ""):
    """The agent package (or one of its modules) imported from the built .pyz, so in-process tests test the file
    a node runs."""
    pyz = str(built_agent())
    if pyz not in sys.path:
        sys.path.insert(0, pyz)
    return importlib.import_module("cardmix_agent" + (f".{module}" if module else ""))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout=30.0, interval=0.1, what="condition"):
    """Poll until predicate() is truthy; its value, or AssertionError after `timeout` seconds."""
    give_up = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > give_up:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def heartbeats_settled(node, quiet: float = 2.0, timeout: float = 30.0) -> None:
    """After killing an agent: wait until no heartbeat it sent before dying is still being stored (the live server
    answers in its own threads), so a deadline the test then moves stays moved."""
    from hardware.models import NodeCredential

    def last():
        return NodeCredential.objects.filter(node=node).values_list("last_heartbeat_at", flat=True).first()

    seen, since, give_up = last(), time.monotonic(), time.monotonic() + timeout
    while time.monotonic() - since < quiet:
        if time.monotonic() > give_up:
            raise AssertionError(f"heartbeats of {node} still arriving after {timeout}s")
        time.sleep(0.1)
        now = last()
        if now != seen:
            seen, since = now, time.monotonic()


class AgentProcess:
    """The built agent (cardmix-agent.pyz) as a separate OS process with the `process` runtime and fake device
    tools."""

    def __init__(self, server: str, token: str, state_dir: Path, extra_env=None, extra_args=()):
        self.state_dir = state_dir
        self.log_path = state_dir.parent / f"{state_dir.name}.log"
        argv = [AGENT_PYTHON, "-I", str(built_agent()), "--server", server, "--token", token, "--runtime", "process",
                "--readiness-bin", str(BIN / "all_reduce_perf"), "--nvidia-smi", str(BIN / "nvidia-smi"),
                "--vendor", "nvidia", "--state-dir", str(state_dir), "--heartbeat-interval", "0.3",
                "--poll-interval", "0.1", "--readiness-timeout", "60", "--http-timeout", "10",
                "--hostname", "agent-under-test", "--ip", str(BIN / "ip"), "--bridge", str(BIN / "bridge"),
                "--mpirun", str(BIN / "mpirun"), "--npu-smi", str(BIN / "npu-smi"), "--dmesg", str(BIN / "dmesg"),
                *extra_args]
        self.log = open(self.log_path, "ab")  # an agent restarted on the same state dir logs after the first
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(extra_env or {})}, start_new_session=True)

    def log_tail(self, n=3000) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")[-n:]

    def kill(self, sig=signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        self.kill(signal.SIGTERM if self.proc.poll() is None else signal.SIGKILL)
        # Stand-in "containers" run in their own sessions; a killed agent leaves them behind.
        for pid_file in self.state_dir.glob("instances/*/pid"):
            try:
                os.killpg(int(pid_file.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        self.log.close()


@pytest.fixture
def docker(tmp_path, monkeypatch):
    """The fake docker CLI (tests/hardware/bin/docker) with its own state; → helpers to read and break it."""
    state = tmp_path / "docker" / "containers.json"
    state.parent.mkdir()
    monkeypatch.setenv("CARDMIX_FAKE_DOCKER_STATE", str(state))

    class Docker:
        def containers(self):
            return json.loads(state.read_text()) if state.exists() else {}

        def networks(self):
            networks = state.parent / "networks.json"
            return json.loads(networks.read_text()) if networks.exists() else {}

        def calls(self):
            log = state.parent / "calls.log"
            return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

        def net_calls(self):
            """The ip/bridge commands the agent ran (the fake CLIs log them beside docker's)."""
            return [c for c in self.calls() if c[0] in ("ip", "bridge")]

        def run(self, *argv):
            """The fake CLI itself, e.g. to start something the agent did not."""
            return subprocess.run([str(BIN / "docker"), *argv], capture_output=True, text=True, check=True).stdout

        def daemon(self, up: bool):
            down = state.parent / "daemon-down"
            down.unlink(missing_ok=True) if up else down.touch()
    return Docker()


@pytest.fixture
def start_agent(tmp_path):
    started: list[AgentProcess] = []

    def start(server: str, token: str, name: str = "agent", state_dir: Path | None = None, **kwargs) -> AgentProcess:
        """A new agent process; `state_dir` = an earlier one's: the same agent restarted (it finds its state)."""
        agent = AgentProcess(server, token, state_dir or tmp_path / f"{name}-{len(started)}", **kwargs)
        started.append(agent)
        return agent

    yield start
    for agent in started:
        agent.stop()


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM the process group, then SIGKILL if it lingers."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass


@pytest.fixture
def sushy_emulator(tmp_path):
    """sushy-emulator --fake on a free loopback port with 3 fake systems and htpasswd (bcrypt) auth."""
    import bcrypt

    exe = Path(sys.executable).with_name("sushy-emulator")
    if not exe.exists():
        pytest.fail(f"sushy-emulator not installed next to {sys.executable} (pip install sushy-tools)")
    port = free_port()
    username, password = "cardmix-bmc", "bmc-pass-123"
    htpasswd = tmp_path / "htpasswd"
    htpasswd.write_text(f"{username}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()}\n")
    systems = [{"uuid": f"2794{i}b59-9e44-4fa7-8e91-f3527a1ef09{i}", "name": f"fake-bm-{i}", "power_state": "Off",
                "nics": [{"mac": f"00:5c:52:31:3a:9{i}", "ip": f"172.22.0.10{i}"}]} for i in range(3)]
    config = tmp_path / "emulator.conf"
    config.write_text(
        f"SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\nSUSHY_EMULATOR_LISTEN_PORT = {port}\n"
        f"SUSHY_EMULATOR_FAKE_DRIVER = True\nSUSHY_EMULATOR_FAKE_SYSTEMS = {systems!r}\n"
        f"SUSHY_EMULATOR_STATE_DIR = {str(tmp_path / 'emulator-state')!r}\n"
        f"SUSHY_EMULATOR_AUTH_FILE = {str(htpasswd)!r}\n")
    log = open(tmp_path / "emulator.log", "wb")
    proc = subprocess.Popen([str(exe), "--config", str(config), "--fake", "-i", "127.0.0.1", "-p", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def up():
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0
        wait_for(up, timeout=30, what="sushy-emulator to listen")
        yield {"url": f"http://127.0.0.1:{port}", "username": username, "password": password, "systems": systems,
               "log": tmp_path / "emulator.log"}
    finally:
        stop_process(proc)
        log.close()


@pytest.fixture
def slurm_cluster(tmp_path_factory):
    """munged + slurmctld (foreground) in a temporary directory with 4 FUTURE nodes; → SLURM_CONF path."""
    work = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "munge", "log"):
        (work / sub).mkdir()
    os.chmod(work / "munge", 0o700)
    key = work / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o600)
    socket_path = work / "munge" / "munge.socket"
    munged = subprocess.Popen(["/usr/sbin/munged", "--foreground", "--force", f"--socket={socket_path}",
                               f"--key-file={key}", f"--pid-file={work / 'munge' / 'munged.pid'}",
                               f"--log-file={work / 'log' / 'munged.log'}",
                               f"--seed-file={work / 'munge' / 'munged.seed'}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
    port = free_port()
    conf = work / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=cardmixtest", "SlurmctldHost=localhost", f"SlurmctldPort={port}",
        f"SlurmdPort={free_port()}", "SlurmUser=root", f"StateSaveLocation={work / 'state'}",
        f"SlurmctldPidFile={work / 'slurmctld.pid'}", f"SlurmctldLogFile={work / 'log' / 'slurmctld.log'}",
        "AuthType=auth/munge", f"AuthInfo=socket={socket_path}", "CredType=cred/munge",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres",
        # Backfill, as real clusters run: slurmctld refuses heterogeneous jobs (the hybrid's header) without it.
        "SchedulerType=sched/backfill", "ReturnToService=2", "MpiDefault=none", "GresTypes=gpu,npu",
        "NodeName=gpu-a[01-02] CPUs=4 RealMemory=1000 Gres=gpu:8 State=FUTURE",
        "NodeName=npu-a[01-02] CPUs=4 RealMemory=1000 Gres=npu:8 State=FUTURE",
        "PartitionName=debug Nodes=ALL Default=YES State=UP", ""]))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    slurmctld = None
    try:
        wait_for(lambda: socket_path.exists(), timeout=20, what="munged socket")
        slurmctld = subprocess.Popen(["/usr/sbin/slurmctld", "-D", "-i", "-f", str(conf)], env=env,
                                     stdout=open(work / "log" / "slurmctld.out", "wb"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        scontrol = shutil.which("scontrol") or "/usr/bin/scontrol"

        def ping():
            if slurmctld.poll() is not None:
                raise AssertionError("slurmctld exited:\n" + (work / "log" / "slurmctld.log").read_text()[-3000:]
                                     if (work / "log" / "slurmctld.log").exists() else "slurmctld exited")
            out = subprocess.run([scontrol, "ping"], env=env, capture_output=True, text=True)
            return "UP" in out.stdout
        wait_for(ping, timeout=30, interval=0.3, what="slurmctld to answer")
        yield {"conf": conf, "env": env, "scontrol": scontrol, "work": work}
    finally:
        if slurmctld is not None:
            stop_process(slurmctld)
        stop_process(munged)


# The socket sacctmgr's connection to slurmdbd reaches munged on: slurm 22.05 ignores AuthInfo's socket= there.
MUNGE_DEFAULT_SOCKET = Path("/run/munge/munge.socket.2")
ACCOUNTING_BINARIES = ("/usr/sbin/slurmdbd", "/usr/sbin/mariadbd", "/usr/bin/mariadb-install-db", "/usr/bin/sacctmgr")


@pytest.fixture
def slurm_accounting_cluster(tmp_path_factory):
    """munged + MariaDB + slurmdbd + slurmctld with accounting enforced (AccountingStorageEnforce=associations,
    EnforcePartLimits=ALL): the controller ties each job to an account and refuses one a partition does not allow.
    Skipped without slurmdbd / MariaDB, or while another munged holds the default socket."""
    missing = [b for b in ACCOUNTING_BINARIES if not Path(b).exists()]
    if missing:
        pytest.skip(f"slurm accounting needs {', '.join(missing)}")
    if MUNGE_DEFAULT_SOCKET.exists():
        pytest.skip(f"{MUNGE_DEFAULT_SOCKET} is in use: this cluster's munged needs it")
    work = tmp_path_factory.mktemp("slurmdbd")
    for sub in ("state", "munge", "log", "db", "run"):
        (work / sub).mkdir()
    os.chmod(work / "munge", 0o700)
    key = work / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o600)
    MUNGE_DEFAULT_SOCKET.parent.mkdir(parents=True, exist_ok=True)
    procs = []

    def start(argv, name, env=None):
        procs.append(subprocess.Popen(argv, env=env, stdout=open(work / "log" / f"{name}.out", "wb"),
                                      stderr=subprocess.STDOUT, start_new_session=True))
        return procs[-1]

    try:
        start(["/usr/sbin/munged", "--foreground", "--force", f"--socket={MUNGE_DEFAULT_SOCKET}", f"--key-file={key}",
               f"--pid-file={work / 'munge' / 'munged.pid'}", f"--log-file={work / 'log' / 'munged.log'}",
               f"--seed-file={work / 'munge' / 'munged.seed'}"], "munged")
        subprocess.run(["/usr/bin/mariadb-install-db", "--no-defaults", f"--datadir={work / 'db'}", "--user=root",
                        "--auth-root-authentication-method=normal", "--skip-test-db"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, timeout=120)
        db_port, db_socket = free_port(), work / "run" / "db.sock"
        start(["/usr/sbin/mariadbd", "--no-defaults", f"--datadir={work / 'db'}", f"--socket={db_socket}",
               "--bind-address=127.0.0.1", f"--port={db_port}", "--skip-name-resolve", "--user=root",
               f"--pid-file={work / 'run' / 'db.pid'}", f"--log-error={work / 'log' / 'db.err'}"], "mariadbd")
        wait_for(lambda: db_socket.exists() and MUNGE_DEFAULT_SOCKET.exists(), timeout=60, what="MariaDB and munged")
        subprocess.run(["mariadb", "--no-defaults", f"--socket={db_socket}", "-uroot", "-e",
                        "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm'; "
                        "GRANT ALL ON *.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;"], check=True, timeout=30)
        dbd_port, ctld_port = free_port(), free_port()
        # slurmdbd reads slurmdbd.conf beside $SLURM_CONF (it has no option for it); the file must be 0600.
        dbd_conf = work / "slurmdbd.conf"
        dbd_conf.write_text("\n".join([
            "AuthType=auth/munge", "DbdHost=localhost", f"DbdPort={dbd_port}", "SlurmUser=root",
            f"PidFile={work / 'run' / 'slurmdbd.pid'}", f"LogFile={work / 'log' / 'slurmdbd.log'}",
            "StorageType=accounting_storage/mysql", "StorageHost=127.0.0.1", f"StoragePort={db_port}",
            "StorageUser=slurm", "StoragePass=slurm", "StorageLoc=slurm_acct_db", ""]))
        os.chmod(dbd_conf, 0o600)
        conf = work / "slurm.conf"
        conf.write_text("\n".join([
            "ClusterName=cardmixacct", "SlurmctldHost=localhost", f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={free_port()}", "SlurmUser=root", f"StateSaveLocation={work / 'state'}",
            f"SlurmctldPidFile={work / 'run' / 'slurmctld.pid'}", f"SlurmctldLogFile={work / 'log' / 'slurmctld.log'}",
            "AuthType=auth/munge", "CredType=cred/munge", "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "SelectType=select/cons_tres", "SchedulerType=sched/backfill", "ReturnToService=2", "MpiDefault=none",
            "AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageHost=localhost",
            f"AccountingStoragePort={dbd_port}", "AccountingStorageEnforce=associations", "EnforcePartLimits=ALL",
            "GresTypes=gpu,npu",
            "NodeName=gpu-a[01-02] CPUs=4 RealMemory=1000 Gres=gpu:8 State=FUTURE",
            "NodeName=npu-a[01-02] CPUs=4 RealMemory=1000 Gres=npu:8 State=FUTURE",
            "PartitionName=debug Nodes=ALL Default=YES State=UP", ""]))
        env = {**os.environ, "SLURM_CONF": str(conf)}
        dbd = start(["/usr/sbin/slurmdbd", "-D"], "slurmdbd", env=env)

        def cluster_added():
            if dbd.poll() is not None:
                raise AssertionError("slurmdbd exited:\n" + (work / "log" / "slurmdbd.out").read_text()[-3000:])
            return subprocess.run(["sacctmgr", "-i", "add", "cluster", "cardmixacct"], env=env, capture_output=True,
                                  text=True, timeout=30).returncode == 0
        wait_for(cluster_added, timeout=60, interval=0.5, what="slurmdbd to take the cluster")
        ctld = start(["/usr/sbin/slurmctld", "-D", "-i", "-f", str(conf)], "slurmctld", env=env)
        scontrol = shutil.which("scontrol") or "/usr/bin/scontrol"

        def ping():
            if ctld.poll() is not None:
                raise AssertionError("slurmctld exited:\n" + (work / "log" / "slurmctld.out").read_text()[-3000:])
            return "UP" in subprocess.run([scontrol, "ping"], env=env, capture_output=True, text=True).stdout
        wait_for(ping, timeout=30, interval=0.3, what="slurmctld to answer")
        yield {"conf": conf, "env": env, "scontrol": scontrol, "sacctmgr": shutil.which("sacctmgr"), "work": work}
    finally:
        for proc in reversed(procs):
            stop_process(proc)


# -- a raw HTTP server: answers the agent as a platform would, or as a broken one would -------------------

def http(status: int, body: dict | bytes) -> bytes:
    """A whole HTTP answer: a JSON body (a dict, or bytes already encoded)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return (f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
            f"Connection: close\r\n\r\n").encode() + data


class RawServer:
    """A loopback HTTP server answering raw bytes: `answer(method, path, body, hits)` → the bytes to send."""

    def __init__(self, answer):
        self.answer, self.hits, self.bodies = answer, [], []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(50)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                while len(body) < length:
                    body += conn.recv(65536)
                method, path = head.split(b" ")[:2]
                # The body first: a test that sees the hit may read its body at once.
                self.bodies.append(json.loads(body) if body else None)
                self.hits.append((method.decode(), path.decode()))
                conn.sendall(self.answer(method.decode(), path.decode(), body, self.hits))

    def count(self, suffix, method=None):
        return sum(p.endswith(suffix) and (method is None or m == method) for m, p in self.hits)

    def close(self):
        self.sock.close()


@pytest.fixture
def raw_server():
    servers = []

    def start(answer):
        servers.append(RawServer(answer))
        return servers[-1]
    yield start
    for server in servers:
        server.close()
