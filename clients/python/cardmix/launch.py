"""`cardmix launch task.yaml`: a SkyPilot-shaped task on Cardmix.

    name: train
    resources:
      accelerators: H100:8        # or 8xH100, or a mix 4xH100+4xAscend
      image_id: pytorch-2.3-cuda12.3   # (`image` works too)
      zone: zone-a
    num_nodes: 2                  # that many times the accelerators, one part per node
    file_mounts:
      /data: <volume id>          # Cardmix volumes, mounted at the path
    envs: {EPOCHS: "3"}
    setup: pip install -r requirements.txt
    run: python train.py

Creates the instance, waits for readiness, runs `setup` then `run` on every node over SSH (streaming the
output, prefixed with the node when there are several), and stops the instance at the end unless --keep.
The command's exit status is the task's: the first non-zero status of a node, else 0.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import threading
from pathlib import Path

import yaml

from .errors import ValidationError
from .spec import image_default, items_of

KNOWN = {"name", "resources", "num_nodes", "file_mounts", "envs", "setup", "run", "workdir"}
RESOURCES = {"accelerators", "image_id", "image", "zone", "kind", "cloud"}


def task_load(path: str) -> dict:
    try:
        task = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as exc:
        raise ValidationError(f"Cannot read the task file {path}: {exc.strerror}.") from exc
    except yaml.YAMLError as exc:
        raise ValidationError(f"The task file {path} is not valid YAML: {exc}.") from exc
    if not isinstance(task, dict):
        raise ValidationError(f"The task file {path} must be a mapping (resources, setup, run…).")
    unknown = sorted(set(task) - KNOWN) + sorted(f"resources.{k}" for k in set(task.get("resources") or {}) - RESOURCES)
    if unknown:
        raise ValidationError(f"Unknown field(s) in {path}: {', '.join(unknown)}.", details={f: ["unknown"] for f in unknown})
    if not (task.get("resources") or {}).get("accelerators"):
        raise ValidationError("A task names its cards: resources.accelerators, e.g. H100:8.",
                              details={"resources.accelerators": ["required"]})
    if not task.get("run"):
        raise ValidationError("A task has a `run` command.", details={"run": ["required"]})
    return task


def _body(task: dict, accelerators, images) -> dict:
    res = task["resources"]
    nodes = int(task.get("num_nodes") or 1)
    if nodes < 1:
        raise ValidationError("num_nodes is at least 1.", details={"num_nodes": [str(nodes)]})
    items = items_of(str(res["accelerators"]), accelerators)
    for item in items:
        item["count"] *= nodes
    image = res.get("image_id") or res.get("image")
    body = {"items": items, "kind": res.get("kind") or "container", "zone": res.get("zone"),
            **({"image": image} if image else image_default(items, accelerators, images))}
    mounts = task.get("file_mounts") or {}
    if mounts:
        body["volumes"] = [{"volume": str(v), "mount_path": str(p)} for p, v in mounts.items()]
    return body


def _ssh_base() -> list[str]:
    # CARDMIX_SSH_OPTS: extra options (an identity file, a known_hosts file) for this machine's ssh client.
    return ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new",
            *shlex.split(os.environ.get("CARDMIX_SSH_OPTS", ""))]


def _remote(task: dict, script: str) -> str:
    exports = "".join(f"export {k}={shlex.quote(str(v))}; " for k, v in (task.get("envs") or {}).items())
    return f"bash -lc {shlex.quote(exports + 'set -e; ' + script)}"


def _run_on(entry: dict, task: dict, script: str, echo, prefix: str) -> int:
    argv = _ssh_base() + ["-p", str(entry["port"]), f"{entry['user']}@{entry['host']}", _remote(task, script)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    for line in proc.stdout:
        echo(prefix + line.rstrip("\n"))
    return proc.wait()


def _on_every_node(entries, task, script, echo) -> int:
    if len(entries) == 1:
        return _run_on(entries[0], task, script, echo, "")
    statuses = [0] * len(entries)

    def one(i, entry):
        statuses[i] = _run_on(entry, task, script, echo, f"({entry['node']}) ")

    threads = [threading.Thread(target=one, args=(i, e)) for i, e in enumerate(entries)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return next((s for s in statuses if s), 0)


def launch_task(client, task: dict, *, name: str | None = None, keep: bool = False, timeout: float = 900.0,
                echo=print, report=None) -> int:
    """Run the task end to end → its exit status. The instance is stopped at the end unless `keep`."""
    body = _body(task, client.catalog.accelerators(), client.catalog.images())
    # Like SkyPilot's own key: every SSH key of the caller is installed, so this machine's ssh can reach it.
    body["ssh_key_ids"] = [k.id for k in client.ssh_keys.list()]
    inst = client.instances.create(name=name or task.get("name") or "task", wait="running", timeout=timeout,
                                   on_state=lambda i: echo(f"[cardmix] {i.name}: {i.state}"), **body)
    status = 0
    try:
        entries = inst.ssh
        if not entries:
            raise ValidationError(f"{inst.name} is running but has no SSH endpoint.")
        for phase in ("setup", "run"):
            if task.get(phase):
                echo(f"[cardmix] {phase} on {len(entries)} node(s)")
                status = _on_every_node(entries, task, str(task[phase]), echo)
                if status:
                    echo(f"[cardmix] {phase} exited with {status}")
                    break
    finally:
        final = inst if keep else client.instances.stop(inst.id)
        echo(f"[cardmix] {inst.name}: {'kept running' if keep else 'stopped'}")
        if report:
            report({"instance": final.to_dict(), "exit_status": status})
    return status
