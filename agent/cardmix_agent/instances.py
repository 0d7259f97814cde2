"""Instances: a prepare and a release, whatever the runtime (containers, stand-in processes, bare metal)."""
from __future__ import annotations

import shutil
from pathlib import Path

from .cluster import cluster_of


def container_of(payload: dict) -> str:
    """The container's name: the platform's (one per group: an instance may hold two on one node), or the
    name a platform that sends none used."""
    return str(payload.get("name") or f"cardmix-{payload['instance_id']}")


def ssh_port_of(payload: dict) -> int | None:
    """The node port the platform chose for the container's sshd; None from a platform that sends none."""
    port = payload.get("ssh_port")
    return int(port) if port else None


def http_ports_of(payload: dict) -> dict[str, int]:
    """{"<container port>": node port} the platform asks a container in its own network to publish
    (env CARDMIX_HTTP_PORTS="31000:8888,31001:6006"); entries that are not two port numbers are skipped."""
    published = {}
    for pair in str((payload.get("env") or {}).get("CARDMIX_HTTP_PORTS", "")).split(","):
        node, _, inside = pair.partition(":")
        if node.isdigit() and inside.isdigit() and 0 < int(node) < 65536 and 0 < int(inside) < 65536:
            published[inside] = int(node)
    return published



class Instances:
    """The state dir's instances/ and the prepare and release commands (the runtime does its part)."""

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

    def do_prepare(self, payload: dict):
        instance_id = payload["instance_id"]
        where = self.instance_dir(container_of(payload) if payload.get("kind") != "bare_metal" else instance_id)
        where.mkdir(parents=True, exist_ok=True)
        keys = list(payload.get("ssh_keys") or [])
        cluster, rdma = cluster_of(payload), self.rdma_devices()
        joined = (self.cluster_said(cluster) if cluster else "") + (self.rdma_said(rdma) if self.fabric_env(payload, rdma)
                                                                    else "")
        part_meta = {**({"rdma_devices": rdma} if rdma else {}),
                     **({"cluster": {"part": cluster["part"], "address": cluster["address"],
                                     "network": cluster["network"]["mode"]}} if cluster else {})}
        mounted, code, mounts = self.volumes_prepare(payload, where)
        if code != 0:
            return mounted, code, {"kind": payload.get("kind")}
        part_meta.update({"volumes": [m["id"] for m in mounts]} if mounts else {})
        if payload.get("kind") == "bare_metal":
            linked, code = self.bare_metal_links(where, mounts)
            if code != 0:
                return mounted + linked, code, {"kind": "bare_metal"}
            joined = mounted + linked + joined
            target, said = self.install_bare_metal_keys(where, keys)
            env = {**(payload.get("env") or {}), **self.fabric_env(payload, rdma)}
            if cluster:  # the host's network; the hostfile where the tenant's programs look for it
                hostfile = self.runtime.bare_metal_hostfile(cluster, self.cluster_write(cluster, where))
                env["CARDMIX_HOSTFILE"] = str(hostfile)
            (where / "environment").write_text("".join(f"{k}={v}\n" for k, v in sorted(env.items())))
            return (f"{said}bare metal ready for {instance_id}: {len(keys)} ssh key(s) in {target}, "
                    f"{len(env)} environment variable(s)\n{joined}", 0, {"kind": "bare_metal", **part_meta})
        self.write_keys(where / "authorized_keys", keys)
        if cluster:
            self.cluster_write(cluster, where)
        return self.runtime.prepare(payload, where, keys=keys, rdma=rdma, joined=mounted + joined, part_meta=part_meta,
                                    mounts=mounts)

    def do_image_save(self, payload: dict):
        """"Save as image": the runtime commits the instance's container and pushes it to the operator's registry."""
        return self.runtime.image_save(payload)

    def do_release(self, payload: dict):
        name = container_of(payload)
        where = self.instance_dir(name if payload.get("cards") else payload["instance_id"])
        legacy_name, legacy_dirs = self.legacy_of(payload)
        # Bare metal (no cards): the keys its prepare wrote go first, so a failed docker rm cannot keep them.
        revoked = self.revoke_bare_metal_keys(where) if not payload.get("cards") and where.is_dir() else ""
        revoked += self.bare_metal_unlink(where) if not payload.get("cards") else ""
        if not payload.get("cards") and (where / "cluster.json").exists():
            self.runtime.drop_bare_metal_hostfile()
        text, code = self.runtime.release(payload, where, legacy_name, legacy_dirs)
        text = revoked + text
        if code != 0:
            return text, code, {}
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
