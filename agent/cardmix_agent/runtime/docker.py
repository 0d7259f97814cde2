"""The docker runtime: each instance's cards in a container of its own, on its own network."""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from ..cluster import cluster_of, cluster_run_args, rdma_run_args
from ..constants import (
    ASCEND_CONTROL_DEVICES,
    ASCEND_MOUNTS,
    DEFAULT_TOKEN_DIR,
    EXIT_CONFIG,
    INSTANCE_LABEL,
    PORT_LABEL,
    log,
)
from ..instances import container_of, http_ports_of, ssh_port_of
from ..limits import limits_argv
from ..programs import run
from .base import Runtime
from .docker_cluster import DockerClusterNetworks
from .docker_images import DockerImages


class DockerRuntime(DockerImages, DockerClusterNetworks, Runtime):
    name = "docker"

    def bare_metal_keys(self, where: Path) -> Path:
        return Path(self.args.authorized_keys)

    def bare_metal_hostfile(self, cluster: dict, written: Path) -> Path:
        hostfile = Path(self.args.cluster_dir) / "hostfile"
        hostfile.parent.mkdir(parents=True, exist_ok=True)
        hostfile.write_text(str(cluster.get("hostfile", "")))
        return hostfile

    def drop_bare_metal_hostfile(self) -> None:
        # The tenant's cluster hostfile on the host: the next tenant's instance writes its own.
        (Path(self.args.cluster_dir) / "hostfile").unlink(missing_ok=True)

    def prepare(self, payload: dict, where: Path, *, keys: list[str], rdma: list[str], joined: str,
                part_meta: dict, mounts: list[dict] = ()) -> tuple[str, int, dict]:
        text, code, meta = self.docker_prepare(payload, where / "authorized_keys", mounts)
        return text + (joined if code == 0 else ""), code, {**meta, **part_meta}

    def release(self, payload: dict, where: Path, legacy_name: str | None, legacy_dirs: list[Path]) -> tuple[str, int]:
        name, text = container_of(payload), ""
        for container in filter(None, (name, legacy_name)):
            removed, code = self.docker_remove(container)
            if code != 0:  # keep the state: the heartbeat still lists it, and a retry or wipe removes it
                return text + removed, code
            if container == name:
                text += f"{name} removed\n"
            elif removed:
                text += f"{container} removed (started without a group name, by an older agent or platform)\n"
        if payload.get("cards"):
            removed, code = self.cluster_release(where, str(payload["instance_id"]))
            if code != 0:  # the state stays: a retried release (or the wipe) removes the network
                return text + removed, code
            text += removed
        return text, code

    def wipe_instances(self, instances: list[Path]) -> tuple[list[str], int]:
        lines, worst = [], 0
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
        return lines, worst

    def probe_argv(self, payload: dict, local: dict, part: int, argv: list[str]):
        if payload.get("mode") != "vxlan" or not local.get("name"):
            return argv, None
        pid, code = run([self.args.docker, "inspect", "-f", "{{.State.Pid}}", local["name"]], timeout=60)
        if code != 0 or not pid.strip().isdigit() or pid.strip() == "0":
            return None, (f"part {part}: container {local['name']} is not running: {pid.strip()[-300:]}\n", 1)
        return [self.args.nsenter, "-t", pid.strip(), "-n", "--", *argv], None

    def docker_run_argv(self, payload: dict, keys_file: Path, mounts: list[dict] = ()) -> list[str]:
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
        rdma = self.agent.rdma_devices()
        env.update(self.agent.fabric_env(payload, rdma))
        # A platform that sends no port predates per-container ports: the host's network, as it expects.
        network = (["--network", name, "-p", f"{port}:22", "--label", f"{PORT_LABEL}={port}"] if port
                   else ["--network", "host"])
        cluster = cluster_of(payload)
        if cluster:  # a part of a multi-part instance: its instance's network instead of one of its own
            network = cluster_run_args(cluster, port, keys_file.parent / "hostfile")
            if cluster["network"]["mode"] != "vxlan" and port:
                env["CARDMIX_SSH_PORT"] = str(port)  # the host's network: the image's sshd listens there itself
        for inside, node_port in self.http_published(payload).items():  # its HTTP ports, for the platform's proxy
            network += ["-p", f"{node_port}:{inside}"]
        argv = [self.args.docker, "run", "-d", "--name", name,
                "--label", f"{INSTANCE_LABEL}={payload['instance_id']}", "--restart", "unless-stopped",
                *network, "--ipc", "private", "--shm-size", self.args.shm_size,
                "--ulimit", "memlock=-1", "-v", f"{keys_file}:/root/.ssh/authorized_keys:ro"]
        argv += rdma_run_args(rdma)
        for mount in mounts:  # volumes and datasets: bind mounts of their directories on the storage root
            argv += ["--mount", f"type=bind,source={mount['source']},target={mount['mount_path']}"
                                + (",readonly" if mount["read_only"] else "")]
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

    def docker_prepare(self, payload: dict, keys_file: Path, mounts: list[dict] = ()):
        """Start a group's container. Its meta's `ssh_port` is the port actually published (None: the host
        network, or nothing started): the platform stores it as the SSH endpoint, and an agent that ignores
        the port sends no such key. `http_ports` ({"<port>": node port}, only when any) are its published HTTP
        ports, which the platform's proxy reaches."""
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
        argv = self.docker_run_argv(payload, keys_file, mounts)
        exposed = self.exposed_mounts(argv)
        if exposed:  # never: the token and the agent's state stay out of every container
            return (freed + f"cardmix-agent: refusing to start {name}: it would mount {', '.join(exposed)}, "
                    "the agent's token or state\n", EXIT_CONFIG, meta)
        if payload.get("registry_auth"):  # a private image: pulled first with its login, which stays off the node
            pulled, code = self.docker_pull_private(str(payload["image"]), payload["registry_auth"])
            freed += pulled
            if code != 0:
                return freed, code, meta
        text, code = run(argv, timeout=self.args.prepare_timeout)
        published = self.http_published(payload) if code == 0 else {}
        return freed + text, code, {**meta, "ssh_port": port if code == 0 else None,
                                    **({"http_ports": published} if published else {})}

    def http_published(self, payload: dict) -> dict[str, int]:
        """The HTTP ports published on node ports: only a container in a network of its own has any (on the
        host's network they listen on the node already)."""
        cluster = cluster_of(payload)
        own = ssh_port_of(payload) and (not cluster or cluster["network"]["mode"] == "vxlan")
        return http_ports_of(payload) if own else {}

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
            shutil.rmtree(self.agent.instance_dir(stale), ignore_errors=True)
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
