"""Volumes: directories on the zone's storage root (NFS, CephFS, JuiceFS, Lustre…; the operator mounts it at the
same path on every node of the zone) that outlive instances, mounted into them at their mount paths.

The prepare payload's `volumes` name each one: `{"id", "kind": disk|shared|dataset, "dir": "volumes/<id>" or
"datasets/<slug>", "mount_path", "read_only", "size_bytes"}`, and `storage_root` the root's path (else
`--storage-root`). A volume's size is the filesystem's project quota where the root supports one (xfs_quota, ext4's
setquota -P, CephFS's ceph.quota.max_bytes); elsewhere the heartbeat's usage is all the platform has, and it flags a
volume over its size. Nothing here ever deletes under the storage root: a volume's data goes only when the platform
deletes the volume (`volume_delete`).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path, PurePosixPath

from .programs import run

VOLUMES_FILE = "volumes.json"  # in an instance's state dir: what its prepare mounted (heartbeat, grow, release)
# Mount paths a volume may never cover: the system's own directories (a subdirectory of /mnt, /data, /workspace,
# /datasets… is the point).
FORBIDDEN_MOUNTS = ("/", "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/proc", "/root", "/run",
                    "/sbin", "/sys", "/tmp", "/usr", "/var")
FORBIDDEN_UNDER = ("/proc/", "/sys/", "/dev/", "/etc/", "/root/.ssh", "/usr/", "/boot/")
CEPH_QUOTA_XATTR = "ceph.quota.max_bytes"
DEFAULT_STORAGE_ROOT = "/mnt/cardmix-storage"


class VolumeError(ValueError):
    """A volume entry the agent will not mount (said in the prepare's output, exit 78)."""


def mount_path_check(path: str) -> str:
    """A normalised absolute mount path, or VolumeError."""
    if not isinstance(path, str) or not path.startswith("/") or "," in path or "\n" in path or "\x00" in path:
        raise VolumeError(f"mount path {path!r} must be an absolute path without commas")
    if os.pardir in PurePosixPath(path).parts:
        raise VolumeError(f"mount path {path!r} may not climb to a parent directory")
    norm = str(PurePosixPath(path))
    if norm in FORBIDDEN_MOUNTS or any(norm.startswith(p) or norm == p.rstrip("/") for p in FORBIDDEN_UNDER):
        raise VolumeError(f"mount path {norm} would cover a system directory")
    return norm


def project_id(volume_id: str) -> int:
    """A volume's project quota id: stable across nodes (every node computes the same), never 0 (no project)."""
    return int(hashlib.sha256(volume_id.encode()).hexdigest()[:7], 16) + 1


def volumes_of(payload: dict, default_root: str) -> tuple[Path | None, list[dict]]:
    """The storage root and the validated volume entries of a prepare (or grow) payload. Each entry gets
    `source`, its absolute directory under the root; a `dir` that leaves the root is a VolumeError."""
    entries = payload.get("volumes") or []
    if not entries:
        return None, []
    root = Path(payload.get("storage_root") or default_root)
    if not root.is_absolute():
        raise VolumeError(f"storage root {root} is not an absolute path")
    seen, out = set(), []
    for entry in entries:
        rel = PurePosixPath(str(entry.get("dir") or ""))
        if rel.is_absolute() or os.pardir in rel.parts or len(rel.parts) != 2 or rel.parts[0] not in ("volumes", "datasets"):
            raise VolumeError(f"volume {entry.get('id')}: directory {str(rel)!r} is not volumes/<id> or datasets/<slug>")
        mount = mount_path_check(str(entry.get("mount_path") or ""))
        if mount in seen:
            raise VolumeError(f"two volumes at {mount}")
        seen.add(mount)
        dataset = rel.parts[0] == "datasets"
        size = entry.get("size_bytes")
        out.append({"id": str(entry.get("id") or rel.parts[1]), "kind": str(entry.get("kind") or ""),
                    "dir": str(rel), "source": str(root / rel), "mount_path": mount,
                    "read_only": bool(entry.get("read_only")) or dataset,
                    "size_bytes": int(size) if size and not dataset else None})
    return root, out


def fs_of(path: Path, mounts: str) -> tuple[str, str]:
    """(filesystem type, mount point) of the mount holding `path`, from /proc/mounts' text."""
    best, fstype, target = "", "", str(path)
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        if (target == point or target.startswith(point.rstrip("/") + "/")) and len(point) > len(best):
            best, fstype = point, fields[2]
    return fstype, best or "/"


def disk_usage(path: Path) -> int:
    """Bytes allocated under `path` (st_blocks, as du counts them); symlinks not followed, hard links once."""
    total, seen, stack = 0, set(), [str(path)]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if (st.st_dev, st.st_ino) in seen:
                        continue
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            continue
    return total


class Volumes:
    """The Agent's volume steps, whatever the runtime; the runtime mounts them (docker --mount, symlinks)."""

    usage_cache: dict

    def storage_mounts(self) -> str:
        where = Path(getattr(self.args, "proc_mounts", "/proc/mounts"))
        return where.read_text() if where.exists() else ""

    def quota_mode(self, root: Path) -> tuple[str, str]:
        """How sizes are enforced under `root`: (xfs|ext4|ceph|none, the filesystem's mount point)."""
        asked = getattr(self.args, "storage_quota", "auto")
        fstype, point = fs_of(root, self.storage_mounts())
        if asked != "auto":
            return asked, point
        return {"xfs": "xfs", "ext4": "ext4", "ceph": "ceph"}.get(fstype, "none"), point

    def quota_set(self, volume: dict, root: Path) -> tuple[str, int, str]:
        """Set a volume's size as its project quota. → (what was done, exit code, the mode used)"""
        size, source = volume["size_bytes"], volume["source"]
        mode, point = self.quota_mode(root)
        if not size or mode == "none":
            return f"{volume['id']}: no quota on this filesystem; usage over {size} bytes is flagged\n", 0, "none"
        proj = project_id(volume["id"])
        if mode == "xfs":
            steps = [[getattr(self.args, "xfs_quota", "xfs_quota"), "-x", "-c", f"project -s -p {source} {proj}", point],
                     [getattr(self.args, "xfs_quota", "xfs_quota"), "-x", "-c", f"limit -p bhard={size} {proj}", point]]
        elif mode == "ext4":
            steps = [[getattr(self.args, "chattr", "chattr"), "-R", "+P", "-p", str(proj), source],
                     [getattr(self.args, "setquota", "setquota"), "-P", str(proj), "0", str(-(-size // 1024)), "0", "0", point]]
        else:  # CephFS: a directory quota, no project ids
            try:
                os.setxattr(source, CEPH_QUOTA_XATTR, str(size).encode())
            except OSError as exc:
                return f"{volume['id']}: setting {CEPH_QUOTA_XATTR} failed: {exc}\n", 1, mode
            return f"{volume['id']}: {CEPH_QUOTA_XATTR}={size}\n", 0, mode
        for argv in steps:
            text, code = run(argv, timeout=120)
            if code != 0:
                return f"{volume['id']}: {' '.join(argv)} failed (exit {code}): {text.strip()[-500:]}\n", code, mode
        return f"{volume['id']}: {mode} project quota {proj}: {size} bytes\n", 0, mode

    def volumes_prepare(self, payload: dict, where: Path) -> tuple[str, int, list[dict]]:
        """Make each volume's directory (datasets must already be there), set its quota, record them in the
        instance's state dir. → (output, exit code, the mounts for the runtime)"""
        try:
            root, volumes = volumes_of(payload, getattr(self.args, "storage_root", DEFAULT_STORAGE_ROOT))
        except VolumeError as exc:
            return f"cardmix-agent: {exc}\n", 78, []
        if not volumes:
            (where / VOLUMES_FILE).unlink(missing_ok=True)
            return "", 0, []
        if not root.is_dir():
            return f"cardmix-agent: the storage root {root} is not mounted on this node\n", 78, []
        text = ""
        for volume in volumes:
            source = Path(volume["source"])
            if volume["dir"].startswith("datasets/"):
                if not source.is_dir():
                    return f"cardmix-agent: dataset {volume['id']} has no copy at {source}\n", 78, []
                text += f"dataset {volume['id']} at {volume['mount_path']} (read-only)\n"
                continue
            source.mkdir(parents=True, exist_ok=True)
            said, code, mode = self.quota_set(volume, root)
            volume["quota"] = mode
            text += said
            if code != 0:
                return text, code, []
            text += f"volume {volume['id']} ({volume['kind']}) at {volume['mount_path']}\n"
        (where / VOLUMES_FILE).write_text(json.dumps({"root": str(root), "volumes": volumes}, indent=1))
        return text, 0, volumes

    def volumes_mounted(self) -> dict[str, dict]:
        """Every volume mounted by an instance on this node: {id: its entry, with `instances`}."""
        found: dict[str, dict] = {}
        for where in sorted((self.state_dir / "instances").glob(f"*/{VOLUMES_FILE}")):
            try:
                recorded = json.loads(where.read_text())
            except (OSError, ValueError):
                continue
            for volume in recorded.get("volumes", []):
                if volume["dir"].startswith("datasets/"):
                    continue
                entry = found.setdefault(volume["id"], {**volume, "instances": []})
                entry["instances"].append(where.parent.name)
        return found

    def volumes_report(self) -> list[dict]:
        """The heartbeat's `volumes`: each mounted volume's usage and size (du-style walks at most every
        --usage-interval seconds per volume: a large volume is not walked every heartbeat)."""
        cache = self.__dict__.setdefault("usage_cache", {})
        interval = float(getattr(self.args, "usage_interval", 300.0))
        report = []
        for volume_id, volume in self.volumes_mounted().items():
            at, used = cache.get(volume_id, (None, None))
            if at is None or time.monotonic() - at >= interval:
                used = disk_usage(Path(volume["source"]))
                cache[volume_id] = (time.monotonic(), used)
            size = volume.get("size_bytes")
            report.append({"id": volume_id, "used_bytes": used, "size_bytes": size, "quota": volume.get("quota", "none"),
                           "over_quota": bool(size) and used > size})
        return report

    def do_volume_grow(self, payload: dict):
        """A larger size for a mounted volume, with nothing detached: its quota is raised (where there is one)
        and what each instance's state dir records, so the next heartbeat reports the new size."""
        volume_id, size = str(payload.get("volume_id") or ""), int(payload.get("size_bytes") or 0)
        try:
            root, volumes = volumes_of({"storage_root": payload.get("storage_root"), "volumes": [
                {"id": volume_id, "dir": payload.get("dir"), "mount_path": "/mnt/grow", "size_bytes": size}]},
                getattr(self.args, "storage_root", DEFAULT_STORAGE_ROOT))
        except VolumeError as exc:
            return f"cardmix-agent: {exc}\n", 78, {}
        if size <= 0 or not Path(volumes[0]["source"]).is_dir():
            return f"cardmix-agent: volume {volume_id} is not on {root} or size {size} is not positive\n", 78, {}
        text, code, mode = self.quota_set(volumes[0], root)
        if code != 0:
            return text, code, {"quota": mode}
        updated = 0
        for where in (self.state_dir / "instances").glob(f"*/{VOLUMES_FILE}"):
            recorded = json.loads(where.read_text())
            for volume in recorded.get("volumes", []):
                if volume["id"] == volume_id:
                    volume["size_bytes"], volume["quota"], updated = size, mode, updated + 1
            where.write_text(json.dumps(recorded, indent=1))
        self.__dict__.setdefault("usage_cache", {}).pop(volume_id, None)
        return (f"{text}volume {volume_id} grown to {size} bytes ({updated} mount(s) on this node, none detached)\n", 0,
                {"quota": mode, "size_bytes": size, "mounts": updated})

    def do_volume_delete(self, payload: dict):
        """A volume the platform deleted: its directory goes from the storage root (never a dataset, never one an
        instance on this node still mounts)."""
        volume_id = str(payload.get("volume_id") or "")
        try:
            root, volumes = volumes_of({"storage_root": payload.get("storage_root"), "volumes": [
                {"id": volume_id, "dir": payload.get("dir"), "mount_path": "/mnt/delete"}]},
                getattr(self.args, "storage_root", DEFAULT_STORAGE_ROOT))
        except VolumeError as exc:
            return f"cardmix-agent: {exc}\n", 78, {}
        source = Path(volumes[0]["source"])
        if not volumes[0]["dir"].startswith("volumes/"):
            return f"cardmix-agent: {volumes[0]['dir']} is not a volume\n", 78, {}
        if volume_id in self.volumes_mounted():
            return f"cardmix-agent: volume {volume_id} is still mounted on this node; kept\n", 1, {}
        if not source.exists():
            return f"volume {volume_id}: nothing at {source}\n", 0, {"removed": False}
        shutil.rmtree(source)
        return f"volume {volume_id}: {source} removed\n", 0, {"removed": True}

    def bare_metal_links(self, where: Path, volumes: list[dict]) -> tuple[str, int]:
        """Bare metal: each volume at its mount path on the host, as a symlink into the storage root (the tenant
        is root there: a symlink it can see through is what it gets). Never over a real directory or file."""
        made = []
        for volume in volumes:
            link = Path(volume["mount_path"])
            if link.is_symlink() and os.readlink(link) != volume["source"] and \
                    os.readlink(link).startswith(str(Path(volume["source"]).parent.parent) + "/"):
                link.unlink()  # an earlier tenant's link into the storage root, or a retried prepare's
            if (link.exists() or link.is_symlink()) and not (link.is_symlink() and os.readlink(link) == volume["source"]):
                return f"cardmix-agent: {link} exists on this host; not mounting {volume['id']} over it\n", 78
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.is_symlink():
                link.symlink_to(volume["source"], target_is_directory=True)
            made.append(str(link))
        (where / "volume-links").write_text("\n".join(made))
        return "".join(f"{m} -> storage root\n" for m in made), 0

    def bare_metal_unlink(self, where: Path) -> str:
        """Bare metal release (and wipe): the links go, never what they point at."""
        listed = where / "volume-links"
        if not listed.exists():
            return ""
        gone = 0
        for line in listed.read_text().splitlines():
            link = Path(line)
            if line and link.is_symlink():
                link.unlink()
                gone += 1
        listed.unlink()
        return f"{gone} volume link(s) removed (their data stays on the storage root)\n" if gone else ""
