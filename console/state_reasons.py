"""Instance state reasons as the console shows them: short sentences for people.

Provisioning writes an instance's `state_reason` and its events' reasons for operators and API callers, who match
them: "create: placed", "readiness passed", "reconciler: stuck in provisioning past its step deadline",
"insufficient_funds: … 1778.400000 CNY …", "waitlist_expired", a quarantined node's hostname. The console rewords
them here, on display only (no query: a history of any length reads the same; what depends on the instance, its
kind, is passed in); the API's `state_reason` and events stay as they are. A reason not known here passes through with
a capital, money as the console writes it."""
import re

from django.utils.translation import gettext, gettext_lazy, ngettext

from provisioning.choices import FUNDS_FAILURE, PROVISIONED_WARM, InstanceKind, InstanceState
from provisioning.services.slurm_partitions import SLURM_FAILURE
from provisioning.stop_keeps import LOST_WITH_VOLUMES, stop_reason

from .service_text import money_for_people

PREPARING = gettext_lazy("Cards placed; the machine is being prepared.")
SOLD_OUT = gettext_lazy("Sold out when requested: waiting on the waitlist for cards to free up.")
REASONS = {
    "create": gettext_lazy("Request accepted."),
    "create: placed": PREPARING,
    "create: sold out": SOLD_OUT,
    "start requested": gettext_lazy("Start requested."),
    "start: placed": PREPARING,
    "start: sold out": SOLD_OUT,
    "woken: capacity freed": gettext_lazy("Cards freed up for it on the waitlist; the machine is being prepared."),
    "provisioned": gettext_lazy("Machine prepared; its interconnect readiness test is running."),
    PROVISIONED_WARM: gettext_lazy("Taken ready from the warm pool (no boot or image step); its readiness test is running."),
    "readiness passed": gettext_lazy("Readiness test passed: handed over to you."),  # monthly packages are not metered
    "stop requested": gettext_lazy("Stop requested."),
    # "stopped" alone: written before stops named what they keep; it meant the same.
    "stopped": gettext_lazy("Stopped: its cards are released and its container deleted with its disk, so nothing is kept "
               "(no volume is attached)."),
    "terminate requested": gettext_lazy("Termination requested."),
    "terminated": gettext_lazy("Terminated."),
    "waitlist_expired": gettext_lazy("No cards freed up within the waitlist's time limit, so the request was ended."),
    "retention_expired": gettext_lazy("Stopped for longer than the retention period, so it was terminated."),
    "inter-node readiness failed twice":
        gettext_lazy("The readiness test across its nodes failed on both attempts, so it was not handed over."),
    "node unreachable past its timeout": gettext_lazy("Its machine stopped answering and did not come back in time, so it was "
                                         "failed and its cards released; it was not charged from when it was last seen."),
    "re-placed: node unreachable": gettext_lazy("Its machine stopped answering, so it is being moved to other cards; it was not "
                                   "charged from when it was last seen."),
    "re-placed: a card failed": gettext_lazy("A card under it failed, so it is being moved to healthy cards (its volumes are "
                                "kept); the failed card was not charged from when it failed."),
    "monthly package ended (renewal: stop)": gettext_lazy("The monthly package ended and was not renewed, so it is stopped."),
    "monthly package ended (renewal: on_demand): billed on demand":
        gettext_lazy("The monthly package ended; it is billed on demand from now on."),
}
# A stop keeps nothing (provisioning/stop_keeps.py): a container is deleted with its disk; a bare-metal
# instance's nodes go to cleaning, which wipes their disks before another tenant gets them.
BARE_METAL_STOPPED = gettext_lazy("Stopped: its nodes are released and wiped, so nothing on their disks is kept.")
REASONS[stop_reason(InstanceKind.CONTAINER)] = REASONS["stopped"]
REASONS[stop_reason(InstanceKind.BARE_METAL)] = BARE_METAL_STOPPED
BY_KIND = {InstanceKind.BARE_METAL: {"stopped": BARE_METAL_STOPPED}}
# What a termination destroys, as the confirmation asks it: a container with its disk, a bare-metal node's disks.
TERMINATE_WARNINGS = {
    InstanceKind.BARE_METAL: gettext_lazy("Its nodes are released and their disks wiped; this cannot be undone."),
}
TERMINATE_WARNING = gettext_lazy("Its cards are released and its container deleted with its disk; this cannot be undone.")
# What a stop destroys, asked before it (page and htmx prompt) since it cannot be undone either.
STOP_WARNINGS = {
    InstanceKind.BARE_METAL: gettext_lazy("Its nodes are released and their disks wiped: nothing on them is kept. "
                             "Billing stops; starting it again places it on freshly wiped nodes."),
}
STOP_WARNING = (gettext_lazy("Its cards are released and its container deleted with its disk: nothing on it is kept (no volume "
                "is attached). Billing stops; starting it again places it on a fresh container."))
AUTO_STOPS = {"funds_exhausted": gettext_lazy("the balance ran out.")}
TOOK_TOO_LONG = {
    InstanceState.PROVISIONING: gettext_lazy("Preparing the machine took too long, so it was not handed over."),
    InstanceState.CHECKING: gettext_lazy("The readiness test took too long, so it was not handed over."),
    InstanceState.STOPPING: gettext_lazy("Stopping took too long; its cards were released."),
    InstanceState.TERMINATING: gettext_lazy("Terminating took too long; everything it held was released."),
}
# The node's hostname is for operators: a customer knows no host, only that a machine failed.
NODE_PREPARE_FAILED = re.compile(r"^\S+: provisioning failed \(exit [^)]*\)$")
NODE_READINESS_FAILED = re.compile(r"^\S+: readiness failed twice$")
REPLACED = re.compile(r"^re-placed: \S+ (quarantined|failed readiness)$")  # older rows say quarantined
STUCK = re.compile(r"^reconciler: stuck in (\w+) past its step deadline(?: \(released\))?$")
AUTO_STOP = re.compile(r"^auto-stop: (.+)$")
# stop_reason with volumes attached: "stopped: kept its volumes ckpt, data, <what was lost>" (names may hold commas).
_LOST = "|".join(re.escape(lost) for lost in sorted(set(LOST_WITH_VOLUMES.values())))
STOPPED_KEPT = re.compile(rf"^stopped: kept its volumes? (.+), ({_LOST})$")
FUNDS = re.compile(rf"^{re.escape(FUNDS_FAILURE)}: (.+)$", re.S)
# services/slurm_partitions.py: the partition's operation and the controller's answer (for operators).
SLURM_FAILED = re.compile(rf"^{re.escape(SLURM_FAILURE)}: (create|delete) ")
SLURM_FAILURES = {
    "create": gettext_lazy("Running, but its Slurm partition could not be created yet; Cardmix tries again automatically."),
    "delete": gettext_lazy("Its Slurm partition could not be removed yet; Cardmix tries again automatically."),
}


def _sentence(text: str) -> str:
    """Money as the console writes it, a capital and a stop."""
    text = money_for_people(text).strip()
    text = text[:1].upper() + text[1:]
    return text + "." if text[-1:].isalnum() else text


def _lower_first(text: str) -> str:
    """"Available funds …" → "available funds …" after a colon (not "NVIDIA …")."""
    return text[:1].lower() + text[1:] if text[1:2].islower() else text


def _stuck(state: str) -> str:
    if state in TOOK_TOO_LONG:
        return TOOK_TOO_LONG[state]
    label = str(InstanceState(state).label) if state in InstanceState.values else state
    return gettext("%(state)s took too long.") % {"state": f"{label[:1].upper()}{label[1:]}"}


def reason_for_people(reason, kind: str = "") -> str:
    """One state reason as a short sentence ("" stays ""); `kind` is the instance's (container, bare_metal), where
    a reason reads differently for it."""
    reason = str(reason or "").strip()
    if not reason:
        return ""
    if reason in BY_KIND.get(kind, {}):
        return BY_KIND[kind][reason]
    if reason in REASONS:
        return REASONS[reason]
    if NODE_PREPARE_FAILED.match(reason):
        return gettext("The machine could not be prepared, so it was not handed over.")
    if NODE_READINESS_FAILED.match(reason):
        # Per machine: the readiness section lists every machine tried, each with its attempts.
        return gettext("The last machine tried failed its readiness test on both attempts, so it was not handed over.")
    if REPLACED.match(reason):
        return gettext("A machine failed its readiness test on both attempts; its cards were placed on another machine.")
    if m := STUCK.match(reason):
        return _stuck(m.group(1))
    if m := STOPPED_KEPT.match(reason):
        names = m.group(1)
        kept = ngettext("its volume %(names)s", "its volumes %(names)s", names.count(", ") + 1) % {"names": names}
        return gettext("Stopped, keeping only %(kept)s: %(lost)s.") % {"kept": kept, "lost": gettext(m.group(2))}
    if m := AUTO_STOP.match(reason):
        why = m.group(1)
        said = AUTO_STOPS.get(why) or _lower_first(_sentence(why.replace("_", " ")))
        return gettext("Stopped automatically: ") + str(said)
    if m := SLURM_FAILED.match(reason):
        return SLURM_FAILURES[m.group(1)]
    if m := FUNDS.match(reason):
        return gettext("Ready, but not handed over: ") + _lower_first(_sentence(m.group(1)))
    return _sentence(reason)


def stop_warning(kind: str = "") -> str:
    """What stopping an instance of `kind` deletes, for the confirmation (page and htmx prompt)."""
    return STOP_WARNINGS.get(kind, STOP_WARNING)


def terminate_warning(kind: str = "") -> str:
    """What terminating an instance of `kind` deletes, for the confirmation (page and htmx prompt)."""
    return TERMINATE_WARNINGS.get(kind, TERMINATE_WARNING)
