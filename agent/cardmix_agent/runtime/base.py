"""The Runtime interface: what differs between running an instance in containers and in local processes."""
from __future__ import annotations

from pathlib import Path


class Runtime:
    """One per agent (`--runtime`). It reads the agent's options and state dir and uses its shared helpers
    (instance dirs, RDMA, cluster commands); the agent routes every runtime-specific step here."""

    name = ""

    def __init__(self, agent):
        self.agent = agent

    @property
    def args(self):
        return self.agent.args

    @property
    def state_dir(self) -> Path:
        return self.agent.state_dir

    def bare_metal_keys(self, where: Path) -> Path:
        """Where a bare-metal prepare puts the tenant's keys."""
        raise NotImplementedError

    def bare_metal_hostfile(self, cluster: dict, written: Path) -> Path:
        """Where a bare-metal part's programs find the cluster hostfile (`written`: the instance dir's copy)."""
        raise NotImplementedError

    def drop_bare_metal_hostfile(self) -> None:
        """A bare-metal release: the hostfile bare_metal_hostfile put outside the state dir goes."""
        raise NotImplementedError

    def prepare(self, payload: dict, where: Path, *, keys: list[str], rdma: list[str], joined: str,
                part_meta: dict, mounts: list[dict] = ()) -> tuple[str, int, dict]:
        """Start a container instance's group (its keys and hostfile are in `where`) with its volumes (`mounts`:
        Volumes.volumes_prepare's entries, each a `source` on the storage root at a `mount_path`). → (output, exit,
        meta)"""
        raise NotImplementedError

    def release(self, payload: dict, where: Path, legacy_name: str | None, legacy_dirs: list[Path]) -> tuple[str, int]:
        """Stop what a prepare started (and what an older agent started for it). → (output, exit code); the
        agent keeps the state when the exit is not 0."""
        raise NotImplementedError

    def wipe_instances(self, instances: list[Path]) -> tuple[list[str], int]:
        """Wipe: stop every instance (also ones the state forgot, where the runtime can find them) and drop the
        state dirs it may. → (lines, the first non-zero exit or 0)"""
        raise NotImplementedError

    def probe_argv(self, payload: dict, local: dict, part: int, argv: list[str]):
        """The reachability probe's argv for a part on this node, run in its network. → (argv, None) or
        (None, (output, exit code)) when it cannot run"""
        raise NotImplementedError

    def image_save(self, payload: dict) -> tuple[str, int, dict]:
        """Commit a container and push it (`container`, `reference`, `registry_auth`). → (output, exit, meta)"""
        return f"cardmix-agent: the {self.name} runtime cannot save images (docker only)\n", 2, {}
