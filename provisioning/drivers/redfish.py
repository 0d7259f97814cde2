"""Redfish driver: bare-metal power and one-time PXE (or virtual-media) boot through the node's BMC (sushy),
then the node agent in the booted image does the rest (SSH keys, readiness, wipe).

Every BMC error or timeout ends in a DriverOutput with a non-zero exit and the BMC's message, never an
exception, so the caller can retry or fail with the node flagged. Credentials never reach the output.
Needs Django (credentials and agent queue are tables), so the registry imports it on first use only.
"""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from core.dbclock import db_now
from hardware.enrollment import (
    enroll_deliver,
    enroll_file,
    enroll_withdraw,
    node_enroll_issue,
    node_token_revoked,
)
from hardware.selectors import bmc_login_for_node
from hardware.services import agent_heartbeat_pause, agent_wait_heartbeat
from inventory.models import Node

from .agent import AgentDriver
from .base import Driver, DriverOutput, NodeRef
from .registry import register_driver

EXIT_BMC = 2  # the BMC refused, failed or is unreachable
EXIT_CONFIG = 78  # EX_CONFIG: no BMC address / credential for the node
EXIT_TIMEOUT = 124


def node_token_revoked_of(node: NodeRef) -> bool:
    return node_token_revoked(node_id=node.id)


class BmcFailure(Exception):
    """A step failed; the message is what the operator reads (no secrets)."""

    def __init__(self, message: str, exit_code: int = EXIT_BMC):
        super().__init__(message)
        self.exit_code = exit_code


@register_driver("redfish")
class RedfishDriver(Driver):
    """Power, boot override and reset through Redfish; the node agent for everything inside the OS."""

    def __init__(self, *, power_timeout_s: float | None = None, agent_timeout_s: float | None = None,
                 http_timeout_s: float | None = None, boot_target: str | None = None, poll_s: float = 1.0,
                 agent_options: Mapping | None = None) -> None:
        from django.conf import settings

        self.power_timeout_s = float(power_timeout_s or settings.REDFISH_POWER_TIMEOUT_SECONDS)
        self.agent_timeout_s = float(agent_timeout_s or settings.REDFISH_AGENT_TIMEOUT_SECONDS)
        self.http_timeout_s = float(http_timeout_s or settings.REDFISH_HTTP_TIMEOUT_SECONDS)
        self.boot_target = boot_target or settings.REDFISH_BOOT_TARGET
        self.poll_s = poll_s
        self.agent = AgentDriver(**dict(agent_options or {}))

    # -- BMC -----------------------------------------------------------------------------------

    def _system(self, node: NodeRef):
        """The sushy System of the node (BMC address + decrypted login from hardware.BmcCredential)."""
        import sushy

        row = Node.objects.get(pk=node.id)
        try:
            login = bmc_login_for_node(row)
        except (LookupError, ValueError) as exc:
            raise BmcFailure(str(exc), EXIT_CONFIG) from None
        parts = urlsplit(login.address)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise BmcFailure(f"{node.hostname}: BMC address must be http(s)://host[:port][/redfish/v1/Systems/<id>]",
                             EXIT_CONFIG)
        root = sushy.Sushy(f"{parts.scheme}://{parts.netloc}", username=login.username, password=login.password,
                           verify=login.verify_tls, read_timeout=self.http_timeout_s,
                           connect_timeout=self.http_timeout_s, server_side_retries=1,
                           server_side_retries_delay=1)
        path = parts.path.rstrip("/")
        if "/Systems/" not in path:  # a BMC that manages exactly one system
            members = root.get_system_collection().members_identities
            if len(members) != 1:
                raise BmcFailure(f"{node.hostname}: the BMC manages {len(members)} systems; "
                                 "give /redfish/v1/Systems/<id> in the BMC address", EXIT_CONFIG)
            path = members[0]
        return root.get_system(path)

    def _wait_power(self, system, want: str) -> float:
        started = time.monotonic()
        while True:
            system.refresh(force=True)
            if getattr(system.power_state, "value", system.power_state) == want:  # "On" / "Off"
                return time.monotonic() - started
            if time.monotonic() - started >= self.power_timeout_s:
                raise BmcFailure(f"power state still {system.power_state} after {self.power_timeout_s:g} s "
                                 f"(waiting for {want})", EXIT_TIMEOUT)
            time.sleep(self.poll_s)

    def _boot(self, node: NodeRef, lines: list[str]) -> None:
        """One-time network boot and power on (restart when already on); then wait for the agent (which
        enrolls first when the node's token was revoked)."""
        system = self._system(node)
        enrolling = self._enroll(node, lines)
        try:
            self._boot_and_wait(node, system, lines)
        finally:
            if enrolling:
                enroll_withdraw(hostname=node.hostname)

    def _enroll(self, node: NodeRef, lines: list[str]) -> bool:
        """The node's token was revoked (its last tenant was root there): hand the OS this boot brings up a
        one-time enrollment secret through the deploy path, which it trades for a new token. → whether."""
        if not node_token_revoked_of(node):
            return False
        if enroll_file(node.hostname) is None:
            raise BmcFailure(f"{node.hostname}: the node's agent token is revoked and NODE_ENROLL_DIR is not set: "
                             "no deploy path to hand the fresh OS its enrollment secret", EXIT_CONFIG)
        secret = node_enroll_issue(node_id=node.id, ttl_s=self.power_timeout_s + self.agent_timeout_s)
        if secret is None:
            return False
        enroll_deliver(hostname=node.hostname, secret=secret)
        lines.append(f"[enroll] {node.hostname}: one-time enrollment secret handed to the deploy boot")
        return True

    def _boot_and_wait(self, node: NodeRef, system, lines: list[str]) -> None:
        import sushy

        target = sushy.BootSource(self.boot_target)
        system.set_system_boot_options(target=target, enabled=sushy.BootSourceOverrideEnabled.ONCE)
        lines.append(f"[bmc] {node.hostname}: boot override {target.value} once")
        mark = db_now()
        system.refresh(force=True)
        reset = sushy.ResetType.FORCE_RESTART if system.power_state == sushy.PowerState.ON else sushy.ResetType.ON
        system.reset_system(reset)
        lines.append(f"[bmc] {node.hostname}: ComputerSystem.Reset {reset.value} accepted")
        waited = self._wait_power(system, "On")
        lines.append(f"[bmc] {node.hostname}: power On after {waited:.1f} s")
        if not agent_wait_heartbeat(node_id=node.id, after=mark, timeout_s=self.agent_timeout_s, poll_s=self.poll_s):
            raise BmcFailure(f"[agent] {node.hostname}: no agent registration within {self.agent_timeout_s:g} s "
                             "after power-on (image did not boot, or the agent cannot reach the platform)",
                             EXIT_TIMEOUT)
        lines.append(f"[agent] {node.hostname}: agent registered after boot")

    def _power_off(self, node: NodeRef, lines: list[str]) -> None:
        import sushy

        system = self._system(node)
        system.refresh(force=True)
        if system.power_state != sushy.PowerState.OFF:
            system.reset_system(sushy.ResetType.FORCE_OFF)
            lines.append(f"[bmc] {node.hostname}: ComputerSystem.Reset ForceOff accepted")
        waited = self._wait_power(system, "Off")
        agent_heartbeat_pause(node_id=node.id)  # silence is expected now, not a fault
        lines.append(f"[bmc] {node.hostname}: power Off after {waited:.1f} s")

    def _guarded(self, node: NodeRef, step, meta: dict) -> DriverOutput:
        """Run a BMC step; every failure becomes a non-zero DriverOutput with the BMC's message."""
        import sushy

        started = time.monotonic()
        lines: list[str] = []
        try:
            extra = step(lines)
        except BmcFailure as exc:
            lines.append(str(exc) if str(exc).startswith("[") else f"[bmc] {node.hostname}: {exc}")
            return DriverOutput("\n".join(lines) + "\n", exc.exit_code, time.monotonic() - started, meta)
        except sushy.exceptions.SushyError as exc:
            status = getattr(exc, "status_code", None)  # the BMC's own HTTP answer, when there was one
            lines.append(f"[bmc] {node.hostname}: {type(exc).__name__}"
                         f"{f' (HTTP {status})' if status else ''}: {exc}")
            return DriverOutput("\n".join(lines) + "\n", EXIT_BMC, time.monotonic() - started, meta)
        except Exception as exc:  # requests/urllib3 errors sushy did not wrap
            lines.append(f"[bmc] {node.hostname}: {type(exc).__name__}: {exc}")
            return DriverOutput("\n".join(lines) + "\n", EXIT_BMC, time.monotonic() - started, meta)
        text = "\n".join(lines) + "\n"
        if isinstance(extra, DriverOutput):  # a step that ended with an agent command
            return DriverOutput(text + extra.text, extra.exit_code, time.monotonic() - started,
                                {**meta, **extra.meta})
        return DriverOutput(text, 0, time.monotonic() - started, meta)

    # -- driver interface ---------------------------------------------------------------------------

    def prepare(self, node: NodeRef, cards: Sequence[int], *, kind: str, image: str, ssh_keys: Sequence[str],
                env: Mapping[str, str], instance_id: str, ssh_port: int | None = None,
                cluster: Mapping[str, Any] | None = None, storage: Mapping[str, Any] | None = None,
                registry_auth: Mapping[str, Any] | None = None) -> DriverOutput:
        """Bare metal: one-time PXE boot + power on + agent registration, then the agent installs keys (and links
        the volumes at their mount paths)."""
        if kind != "bare_metal":
            return self.agent.prepare(node, cards, kind=kind, image=image, ssh_keys=ssh_keys, env=env,
                                      instance_id=instance_id, ssh_port=ssh_port, cluster=cluster, storage=storage,
                                      registry_auth=registry_auth)

        def step(lines):
            self._boot(node, lines)
            return self.agent.prepare(node, cards, kind=kind, image=image, ssh_keys=ssh_keys, env=env,
                                      instance_id=instance_id, cluster=cluster, storage=storage)

        return self._guarded(node, step, {"kind": kind, "image": image, "boot_target": self.boot_target})

    def release(self, node: NodeRef, cards: Sequence[int], *, instance_id: str) -> DriverOutput:
        """Container (cards given, even all of them): the agent removes it. Bare metal (no cards): power off."""
        if cards:
            return self.agent.release(node, cards, instance_id=instance_id)
        return self._guarded(node, lambda lines: self._power_off(node, lines), {"instance_id": instance_id})

    def wipe(self, node: NodeRef) -> DriverOutput:
        """Boot the deploy image (one-time PXE) and have its agent wipe disks and reset accelerators."""

        def step(lines):
            self._boot(node, lines)
            return self.agent.wipe(node)

        return self._guarded(node, step, {"command": "wipe", "boot_target": self.boot_target})

    def install_keys(self, node: NodeRef, *, instance_id: str, ssh_keys: Sequence[str]) -> DriverOutput:
        """The node runs (a warm-pool node, deployed and verified): its agent writes the keys; no BMC step."""
        return self.agent.install_keys(node, instance_id=instance_id, ssh_keys=ssh_keys)

    def power_state(self, node: NodeRef) -> str:
        """The BMC's current power state ("On", "Off", …) — for operators and tests."""
        system = self._system(node)
        return str(system.power_state.value)

    def readiness(self, node: NodeRef, cards: Sequence[int]) -> DriverOutput:
        return self.agent.readiness(node, cards)

    def image_save(self, node: NodeRef, *, container: str, reference: str,
                   registry_auth: Mapping[str, Any] | None = None, timeout_s: float = 3600.0) -> DriverOutput:
        return self.agent.image_save(node, container=container, reference=reference, registry_auth=registry_auth,
                                     timeout_s=timeout_s)

    def health_check(self, node: NodeRef, card: int) -> DriverOutput:
        return self.agent.health_check(node, card)

    def inter_node(self, nodes: Sequence[NodeRef], cards_per_node: int, *,
                   cards: Sequence[Sequence[int]] | None = None) -> DriverOutput:
        return self.agent.inter_node(nodes, cards_per_node, cards=cards)

    def reachability(self, nodes: Sequence[NodeRef], cluster: Mapping[str, Any], *,
                     timeout_s: float = 60.0) -> DriverOutput:
        return self.agent.reachability(nodes, cluster, timeout_s=timeout_s)

    def topology(self, node: NodeRef) -> DriverOutput:
        return self.agent.topology(node)
