"""Files that must never be half-written."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


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
