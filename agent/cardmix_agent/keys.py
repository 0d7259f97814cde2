"""Bare metal: the tenant's SSH keys in root's authorized_keys, the operator's own saved and given back; a warm node's
hand-over (`install_keys`) writes them on a node deployed before its tenant was known."""
from __future__ import annotations

import base64
import errno
import hashlib
import json
import os
import stat
from pathlib import Path

from .constants import KEYS_MARKER, ORIGINAL_KEYS_DIR
from .files import atomic_put, fsync_dir, make_private_dir


class BareMetalKeys:
    """The keys half of a bare-metal prepare, release and wipe."""

    def bare_metal_keys(self, where: Path) -> Path:
        """Where a bare-metal prepare puts the tenant's keys: root's authorized_keys (the process runtime: its
        state dir)."""
        return self.runtime.bare_metal_keys(where)

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

    def do_install_keys(self, payload: dict):
        """A warm bare-metal node's hand-over (agents from 1.7.0): the instance's keys become root's authorized_keys,
        replaced atomically (the operator's own file saved first, once), and its state dir records them so its
        release (or a wipe) takes them away and gives the operator's back. A line that is not one key is refused
        before anything is written: a newline inside one would add a key nobody chose."""
        instance_id = str(payload["instance_id"])
        keys = [str(k).strip() for k in payload.get("ssh_keys") or []]
        bad = [i for i, k in enumerate(keys) if not k or "\n" in k or "\r" in k or "\0" in k]
        if bad:
            return (f"cardmix-agent: ssh key(s) {bad} of {instance_id} are not one line each; nothing written\n", 65,
                    {"instance_id": instance_id})
        where = self.instance_dir(instance_id)
        where.mkdir(parents=True, exist_ok=True)
        target, said = self.install_bare_metal_keys(where, keys)
        if not (where / "environment").exists():  # a bare-metal instance's dir (what a wipe revokes keys of)
            (where / "environment").write_text("")
        return (f"{said}{len(keys)} ssh key(s) of {instance_id} in {target}\n", 0,
                {"instance_id": instance_id, "ssh_keys": len(keys), "target": str(target)})

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
