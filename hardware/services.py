"""Writes of the real-hardware paths: agent tokens, heartbeats, agent commands, BMC credentials.

Slurm partitions live in `slurm.py`; node cleaning, which drives the node's driver, in
`provisioning/services/cleaning.py`.
"""
import time
import uuid
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.db.models.functions import Now
from django.utils.translation import gettext

from core.dbclock import db_now
from core.errors import InvalidState, NotFoundError, ValidationFailed
from core.locks import try_advisory_xact_lock
from core.outbox import outbox_send
from inventory.choices import HolderKind, NodeState
from inventory.lock_objects import node_lock
from inventory.models import CardAllocation, Node
from inventory.services import node_set_state
from tenancy.audit import audit_record

from .bmc_secrets import bmc_encrypt
from .card_health import health_signals, health_summary, heartbeat_health_record
from .choices import CommandKind, CommandState
from .enrollment import token_retire
from .hooks import heartbeat_reported
from .models import AgentCommand, BmcCredential, NodeCredential
from .tokens import PREFIX_DISPLAY_LEN, node_token_generate, node_token_hash

# node_set_state reason written by the heartbeat check; a returning agent clears only this one.
UNREACHABLE_REASON = "agent heartbeat missed"
# Only nodes in these states are marked unreachable (an operator's maintenance/quarantine stays as set).
WATCHED_STATES = (NodeState.AVAILABLE, NodeState.DRAINING, NodeState.CLEANING)
OUTPUT_LIMIT = 512 * 1024  # characters of agent output kept per command
CLAIM_LIMIT = 10  # commands handed out per poll at most (an agent asks for fewer with `?limit=`)


# -- agent tokens ------------------------------------------------------------------------------

def node_token_issue(*, node, actor=None, request=None) -> tuple[NodeCredential, str]:
    """Issue or rotate a node's agent token; returns (credential, secret) — the secret is shown once."""
    secret = node_token_generate()
    with transaction.atomic():
        cred = NodeCredential.objects.select_for_update().filter(node=node).first()
        rotated = cred is not None
        if cred is None:
            cred = NodeCredential(node=node)
        else:
            token_retire(cred, reason="rotated")  # still refused as this node's (and audited) from now on
        cred.token_hash, cred.prefix = node_token_hash(secret), secret[:PREFIX_DISPLAY_LEN]
        cred.registered_at = None  # the agent registers again with the new token
        # An operator's token ends a revocation (e.g. a node reimaged by hand) and any pending enrollment.
        cred.revoked_at = cred.enroll_hash = cred.enroll_until = None
        cred.save()
        if rotated:
            NodeCredential.objects.filter(pk=cred.pk).update(rotated_at=Now())
        audit_record(action="node.agent_token_rotate" if rotated else "node.agent_token_issue", actor=actor,
                     request=request, target=node, details={"prefix": cred.prefix, "hostname": node.hostname})
    return cred, secret


# -- heartbeats --------------------------------------------------------------------------------

def agent_heartbeat(*, credential: NodeCredential, report: dict) -> NodeCredential:
    """Record a heartbeat (registration on the first one) and set the next deadline on the DB clock.

    A node that was marked unreachable for a missed heartbeat returns to the state it had then.
    """
    now = db_now()
    # Bus ids remembered from earlier heartbeats: a card that fell off the bus is missing from this one's query.
    signals, buses = health_signals(report, (credential.facts or {}).get("card_buses") or {})
    with transaction.atomic():
        # The credential's row only: node rows are locked before credential rows (heartbeats_check, _node_resume).
        cred = NodeCredential.objects.select_for_update(of=("self",)).select_related("node").get(pk=credential.pk)
        first = cred.registered_at is None
        cred.registered_at = cred.registered_at or now
        cred.last_heartbeat_at = now
        cred.heartbeat_deadline = now + timedelta(seconds=settings.AGENT_HEARTBEAT_TIMEOUT_SECONDS)
        cred.agent_version = str(report.get("agent_version", ""))[:40]
        cred.runtime = str(report.get("runtime", ""))[:20]
        cred.facts = {**report, "health_signals": health_summary(signals), "card_buses": buses} \
            if signals or buses else report
        cred.save(update_fields=["registered_at", "last_heartbeat_at", "heartbeat_deadline", "agent_version",
                                 "runtime", "facts"])
        if first:
            audit_record(action="node.agent_register", target=cred.node,
                         details={"hostname": cred.node.hostname, "agent_version": cred.agent_version,
                                  "runtime": cred.runtime, "devices": len(report.get("devices") or [])})
    node_size_fill(node=cred.node, report=report)
    if signals:
        heartbeat_health_record(node=cred.node, signals=signals, at=now)  # a failed card: its user is told now
    heartbeat_reported(node_id=cred.node_id, zone_id=cred.node.zone_id, report=report)  # e.g. volume usage
    # Read after the commit above: a check that marks the node later sees the new deadline and skips it.
    if _unreachable_for_heartbeat(Node.objects.filter(pk=cred.node_id)).exists():
        _node_resume(cred.node_id)
    return cred


def node_size_fill(*, node: Node, report: dict) -> None:
    """The host's CPUs and RAM from its agent's report, where the node has none yet: an operator's value (Admin →
    Nodes) stands, so cores or RAM kept back for the host are not handed to containers. No query once both are
    known."""
    size = {field: report.get(key) for field, key in (("cpu_cores", "cpus"), ("memory_mib", "memory_mib"))
            if report.get(key) and getattr(node, field) is None}
    for field, value in size.items():
        Node.objects.filter(pk=node.pk, **{f"{field}__isnull": True}).update(**{field: value})
        setattr(node, field, value)


def _unreachable_for_heartbeat(nodes):
    return nodes.filter(state=NodeState.UNREACHABLE, state_reason__startswith=UNREACHABLE_REASON)


def _is_unreachable_for_heartbeat(node) -> bool:
    """The row-level twin of _unreachable_for_heartbeat: marked by heartbeats_check, not by an operator."""
    return node.state == NodeState.UNREACHABLE and node.state_reason.startswith(UNREACHABLE_REASON)


def _node_resume(node_id) -> None:
    # Locks node then credential, like heartbeats_check, so the two never deadlock.
    with transaction.atomic():
        node = node_lock(node_id)
        if not _is_unreachable_for_heartbeat(node):
            return  # an operator changed it meanwhile: theirs stands
        cred = NodeCredential.objects.select_for_update().get(node_id=node_id)
        state, reason = cred.resume_state or NodeState.AVAILABLE, cred.resume_reason
        if state == NodeState.AVAILABLE or not reason:
            reason = "agent heartbeat resumed"
        cred.resume_state, cred.resume_reason = "", ""
        cred.save(update_fields=["resume_state", "resume_reason"])
        node_set_state(node=node, state=state, reason=reason)
        _dark_sweep_dispatch()  # its instances' notices end and their meters open again


def _dark_sweep_dispatch() -> None:
    """Ask provisioning (by task name: it sits above hardware) to act on nodes gone dark or back, after this
    transaction commits; its beat does the same every NODE_DARK_SWEEP_SECONDS, so a lost message only delays it."""
    outbox_send("provisioning.instances_dark_sweep")


def node_resume_state(node) -> str | None:
    """While the node is unreachable for a missed heartbeat: the state its agent's return restores; else None."""
    if not _is_unreachable_for_heartbeat(node):
        return None
    return (NodeCredential.objects.filter(node_id=node.pk).values_list("resume_state", flat=True).first()
            or NodeState.AVAILABLE)


def node_resume_state_replace(*, node_id, expect: str, state: str, reason: str) -> bool:
    """While the node is unreachable for a missed heartbeat and would come back `expect`, make it come back
    `state` instead (e.g. the outcome of a cleaning pass that ended meanwhile). Call under the node's lock."""
    return bool(NodeCredential.objects.filter(node_id=node_id, resume_state=expect)
                .filter(node__in=_unreachable_for_heartbeat(Node.objects.all()))
                .update(resume_state=state, resume_reason=reason[:500]))


def agent_heartbeat_pause(*, node_id) -> None:
    """We powered the node off on purpose: expect no heartbeat until the agent speaks again."""
    NodeCredential.objects.filter(node_id=node_id).update(heartbeat_deadline=None)


def heartbeats_check() -> list[str]:
    """Nodes whose agent missed its deadline → `unreachable` (no new placements); their instances are flagged.

    The state and reason the node had are kept on its credential; the agent's next heartbeat restores them.

    The flag is an audit event `instance.node_unreachable` per instance holding cards there (target
    provisioning.instance / holder id); `selectors.unreachable_instance_ids()` reads the live state.
    Returns the hostnames marked. Beat runs once: an advisory lock makes a second beat a no-op.
    """
    marked: list[str] = []
    with transaction.atomic():
        if not try_advisory_xact_lock("hardware.heartbeats_check"):
            return marked
        late = list(NodeCredential.objects.filter(heartbeat_deadline__lt=Now(), node__state__in=WATCHED_STATES)
                    .order_by("node_id").values_list("node_id", flat=True))
        for node_id in late:
            # Node then credential (as a returning heartbeat does); re-checked under the locks, so a
            # heartbeat or an operator's change that landed meanwhile wins.
            node = node_lock(node_id)
            cred = NodeCredential.objects.select_for_update().get(node_id=node_id)
            deadline = cred.heartbeat_deadline
            if node.state not in WATCHED_STATES or deadline is None or deadline >= db_now():
                continue
            cred.resume_state, cred.resume_reason = node.state, node.state_reason
            cred.save(update_fields=["resume_state", "resume_reason"])
            last = cred.last_heartbeat_at.isoformat() if cred.last_heartbeat_at else "never"
            node_set_state(node=node, state=NodeState.UNREACHABLE,
                           reason=f"{UNREACHABLE_REASON} (last {last}, threshold "
                                  f"{settings.AGENT_HEARTBEAT_TIMEOUT_SECONDS:g} s)")
            holders = (CardAllocation.objects.live().filter(card__node=node, holder_kind=HolderKind.INSTANCE)
                       .values_list("holder_id", flat=True).distinct())
            for holder_id in sorted(set(holders)):
                audit_record(action="instance.node_unreachable", target_type="provisioning.instance",
                             target_id=holder_id, details={"node": str(node.pk), "hostname": node.hostname,
                                                           "last_heartbeat": last})
            marked.append(node.hostname)
        if marked:
            _dark_sweep_dispatch()  # tell the users, stop billing from the last heartbeat
    return marked


def agent_wait_heartbeat(*, node_id, after, timeout_s: float, poll_s: float = 1.0) -> bool:
    """Wait until the node's agent heartbeats after `after` (DB clock); False on timeout."""
    give_up = time.monotonic() + timeout_s
    while True:
        if NodeCredential.objects.filter(node_id=node_id, last_heartbeat_at__gt=after).exists():
            return True
        if time.monotonic() >= give_up:
            return False
        time.sleep(poll_s)


# -- commands ----------------------------------------------------------------------------------

def agent_command_enqueue(*, node_id, kind: str, payload: dict, timeout_s: float) -> AgentCommand:
    """Queue one operation for the node's agent; it picks it up on its next poll."""
    if kind not in CommandKind.values:
        raise ValidationFailed(gettext("Unknown agent command."), details={"kind": [gettext('%(kind)s is not a command.') % {'kind': repr(kind)}]})
    deadline = db_now() + timedelta(seconds=timeout_s)
    return AgentCommand.objects.create(node_id=node_id, kind=kind, payload=payload, deadline=deadline)


def agent_commands_claim(*, credential: NodeCredential, limit: int = CLAIM_LIMIT,
                         lease: bool = False) -> list[AgentCommand]:
    """Hand the node's queued, unexpired commands to its agent, oldest first.

    Without a lease (agents before 1.3.0) each one handed out is `delivered` for good: it may have started.
    With `lease`, each carries a lease (`lease_id`, `lease_until` = DB now + AGENT_COMMAND_LEASE_SECONDS) that the
    agent's start acknowledgement (`agent_command_start`) must beat. First, every delivered command of the node whose
    lease ran out unacknowledged goes back to `queued` (it never started: the acknowledgement is refused once the
    lease is over), so an agent that died before starting it, or never got the poll's answer, gets it again. Both
    under row locks, skipping rows another transaction holds (an acknowledgement, a withdrawal, a result).

    Order is kept: no command is handed out while an older one of the node waits on a running lease (its agent may
    still start it, or it comes back when the lease runs out), so a command lost on the way never runs after a newer
    one (a release queued after a prepare, or a prepare queued after a release of the same container name).
    Claims of one node take turns on its credential's row: two at once (a poll the agent timed out on, still
    running, and its next one) would each skip the command the other is leasing and hand out the one behind it."""
    with transaction.atomic():
        list(NodeCredential.objects.select_for_update().filter(pk=credential.pk).values_list("pk", flat=True))
        lapsed = (AgentCommand.objects.select_for_update(skip_locked=True)
                  .filter(node_id=credential.node_id, state=CommandState.DELIVERED, lease_until__lte=Now())
                  .values("pk"))
        AgentCommand.objects.filter(pk__in=lapsed, state=CommandState.DELIVERED, lease_until__lte=Now()).update(
            state=CommandState.QUEUED, delivered_at=None, lease_id=None, lease_until=None)
        # Any older one still under a lease counts, lapsed too: one the re-queue skipped (a start holds its row)
        # may yet start.
        leased_before = AgentCommand.objects.filter(node_id=OuterRef("node_id"), created_at__lt=OuterRef("created_at"),
                                                    state=CommandState.DELIVERED, lease_until__isnull=False)
        rows = list(AgentCommand.objects.select_for_update(skip_locked=True)
                    .filter(node_id=credential.node_id, state=CommandState.QUEUED, deadline__gt=Now())
                    .filter(~Exists(leased_before))
                    .order_by("created_at")[:limit])
        if rows and lease:
            now = db_now()
            fields = {"state": CommandState.DELIVERED, "delivered_at": now, "lease_id": uuid.uuid4(),
                      "lease_until": now + timedelta(seconds=settings.AGENT_COMMAND_LEASE_SECONDS)}
            AgentCommand.objects.filter(pk__in=[r.pk for r in rows]).update(**fields)
            for row in rows:
                for name, value in fields.items():
                    setattr(row, name, value)
        elif rows:
            AgentCommand.objects.filter(pk__in=[r.pk for r in rows]).update(
                state=CommandState.DELIVERED, delivered_at=Now(), lease_id=None, lease_until=None)
    return rows


def _own_command_locked(credential: NodeCredential, command_id) -> AgentCommand:
    """One of the credential's node's commands, row-locked; any other node's answers 404 (never says it exists)."""
    cmd = AgentCommand.objects.select_for_update().filter(pk=command_id, node_id=credential.node_id).first()
    if cmd is None:
        raise NotFoundError(gettext("No such command for this node."))
    return cmd


def agent_command_start(*, credential: NodeCredential, command_id, lease=None) -> AgentCommand:
    """The agent is about to run one of ITS commands (404 for any other): allowed only while the command is still
    delivered under the lease `lease` and that lease (and the command's deadline) has not run out, DB clock. Clears
    the lease: a started command is never handed out again. A repeat (the answer was lost) answers the same; anything
    else is InvalidState (409), and the agent does not run the command."""
    with transaction.atomic():
        cmd = _own_command_locked(credential, command_id)
        if cmd.state == CommandState.DONE:
            raise InvalidState(gettext("This command has its result already."))
        if cmd.state == CommandState.EXPIRED:
            raise InvalidState(gettext("The platform stopped waiting for this command."))
        if cmd.state != CommandState.DELIVERED or (cmd.lease_id is not None and str(cmd.lease_id) != str(lease)):
            raise InvalidState(gettext("The lease on this command ran out; it is handed out again."))
        if cmd.started_at is not None:
            return cmd  # acknowledged already under this lease
        now = db_now()
        if cmd.lease_until is not None and cmd.lease_until <= now:
            raise InvalidState(gettext("The lease on this command ran out; it is handed out again."))
        if cmd.deadline <= now:
            raise InvalidState(gettext("The platform stopped waiting for this command."))
        cmd.started_at, cmd.lease_until = now, None
        cmd.save(update_fields=["started_at", "lease_until"])
    return cmd


def agent_command_complete(*, credential: NodeCredential, command_id, exit_code: int, output: str,
                           duration_s: float | None = None, meta: dict | None = None, lease=None) -> AgentCommand:
    """Store what the node printed for one of ITS commands (404 for any other); a repeat is a no-op.

    A command that cannot have run (still queued, or leased and never acknowledged) refuses it: the agent answers
    so for a start whose answer it never got, or that it was sending when it died. Its lease is taken back at once,
    under the row lock, so a start still on the way (a busy web worker, a row lock) is refused too and the command,
    queued again, is handed out at the next poll: never left started with nobody running it. Such an answer names
    its `lease`; one for an earlier hand-out (delayed on the way, while the command was handed out again and
    started) is refused and changes nothing."""
    with transaction.atomic():
        cmd = _own_command_locked(credential, command_id)
        if cmd.state == CommandState.DONE:
            return cmd
        if cmd.state == CommandState.EXPIRED:
            raise InvalidState(gettext("The platform stopped waiting for this command."))
        if lease is not None and str(cmd.lease_id) != str(lease):
            raise InvalidState(gettext("This answer is for an earlier hand-out of this command."))
        started = _may_have_started(cmd.state, cmd.delivered_at, cmd.lease_id, cmd.started_at)
        if not started:
            AgentCommand.objects.filter(pk=cmd.pk).update(state=CommandState.QUEUED, delivered_at=None,
                                                          lease_id=None, lease_until=None)
        else:
            cmd.state, cmd.exit_code = CommandState.DONE, int(exit_code)
            cmd.output, cmd.duration_s, cmd.meta = output[:OUTPUT_LIMIT], duration_s, meta or {}
            cmd.lease_until = None
            cmd.save(update_fields=["state", "exit_code", "output", "duration_s", "meta", "lease_until"])
            AgentCommand.objects.filter(pk=cmd.pk).update(finished_at=Now())
    if not started:  # raised after the commit: the lease stays taken back
        raise InvalidState(gettext("This command was never started; it is handed out again."))
    return cmd


def _may_have_started(state, delivered_at, lease_id, started_at) -> bool:
    """Whether the agent may have run a command: it answered, acknowledged its start, or took it without a lease
    (an agent before 1.3.0 starts what it is handed). A leased one it never acknowledged did not run."""
    return state == CommandState.DONE or started_at is not None or (delivered_at is not None and lease_id is None)


def agent_prepare_reached(*, node_id, instance_id, cards=None) -> bool:
    """Whether a prepare of this instance (on `cards`, for one container; or the install_keys of a warm node's hand-over)
    ever reached the node's agent.

    Prepares that cannot have started are withdrawn first (expired), under their row locks: those still queued
    (or put back after a lease ran out) and those delivered under a lease the agent has not acknowledged (the
    acknowledgement, which takes the same lock, then finds the command expired and the agent does not run it).
    So after this answers False none can be handed out or started: a release then has nothing to stop and need
    not wait for a dead agent.
    """
    with transaction.atomic():
        # A warm-pool node was prepared before its tenant was known: the keys its hand-over installed count too.
        prepares = AgentCommand.objects.filter(node_id=node_id, kind__in=[CommandKind.PREPARE, CommandKind.INSTALL_KEYS],
                                               payload__instance_id=str(instance_id))
        if cards:
            prepares = prepares.filter(payload__cards=list(cards))
        # Locks wait for a claim or an acknowledgement in progress (they hold these rows), so its outcome counts.
        rows = list(prepares.select_for_update()
                    .values_list("pk", "state", "delivered_at", "lease_id", "started_at"))
        unstarted = [pk for pk, state, *rest in rows
                     if state in (CommandState.QUEUED, CommandState.DELIVERED) and not _may_have_started(state, *rest)]
        AgentCommand.objects.filter(pk__in=unstarted).update(state=CommandState.EXPIRED, finished_at=Now(),
                                                             lease_until=None)
        return any(_may_have_started(state, *rest) for _pk, state, *rest in rows)


def agent_command_wait(*, command_id, poll_s: float = 1.0) -> AgentCommand:
    """Poll the row until the agent's result arrives or its deadline (DB clock) passes → expired."""
    while True:
        cmd = AgentCommand.objects.get(pk=command_id)
        if cmd.state in (CommandState.DONE, CommandState.EXPIRED):
            return cmd
        if cmd.deadline <= db_now():
            AgentCommand.objects.filter(pk=cmd.pk, state__in=[CommandState.QUEUED, CommandState.DELIVERED]
                                        ).update(state=CommandState.EXPIRED, finished_at=Now())
            continue  # re-read: the result may have won the race
        time.sleep(poll_s)


# -- BMC credentials -----------------------------------------------------------------------------

def bmc_credential_set(*, name: str, username: str, password: str, verify_tls: bool = True, actor=None,
                       request=None) -> BmcCredential:
    """Create or replace a BMC login (password encrypted at rest); nodes name it in bmc_credentials_ref."""
    if not name or not username or not password:
        raise ValidationFailed(gettext("Name, username and password are required."),
                               details={f: ["This field is required."]
                                        for f, v in (("name", name), ("username", username),
                                                     ("password", password)) if not v})
    with transaction.atomic():
        cred, created = BmcCredential.objects.update_or_create(
            name=name, defaults={"username": username, "password_encrypted": bmc_encrypt(password),
                                 "verify_tls": verify_tls})
        audit_record(action="bmc_credential.create" if created else "bmc_credential.update", actor=actor,
                     request=request, target=cred, details={"name": name})  # never the secret
    return cred


def node_for_agent(credential: NodeCredential) -> Node:
    """The credential's node with zone and accelerator."""
    return Node.objects.select_related("zone", "accelerator").get(pk=credential.node_id)
