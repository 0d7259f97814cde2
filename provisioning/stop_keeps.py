"""What a stop keeps, per instance kind: the one source of the API's stop reason, the console's sentences and the
emails, so none of them promises a disk the fleet does not keep.

A container's stop removes the container (the agent's `docker rm`, and its state for it): its disk goes with it.
A bare-metal instance's nodes are released to node cleaning, which wipes their disks before another tenant gets
them. What a stop keeps is the volumes attached to the instance (storage: they live on the zone's storage root,
never on a node's disk); `volumes` names them, and without any the sentences say nothing is kept.
"""
from django.utils.translation import gettext, gettext_noop, ngettext

from .choices import InstanceKind

# What a stop does to what the instance had on disk; "nothing is kept" follows from it for every kind today.
# English in the stored stop reason (stop_reason); stop_keeps translates them (gettext_noop marks them for the catalog).
LOST = {
    InstanceKind.CONTAINER: gettext_noop("its container is deleted with its disk (no volume is attached)"),
    InstanceKind.BARE_METAL: gettext_noop("its nodes are wiped when released"),
}


# The same with volumes attached: what is lost is the rest.
LOST_WITH_VOLUMES = {
    InstanceKind.CONTAINER: gettext_noop("its container is deleted with the rest of its disk"),
    InstanceKind.BARE_METAL: gettext_noop("its nodes are wiped when released"),
}


def _kept(volumes) -> str:
    names = ", ".join(sorted(volumes))
    return f"its volume{'s' if len(volumes) > 1 else ''} {names}"


def stop_keeps(kind: str, volumes=()) -> str:
    """What survives a stop of an instance of `kind` with these volumes (names), as a sentence for people (in the
    active language)."""
    if volumes:
        kept = ngettext("its volume %(names)s", "its volumes %(names)s", len(volumes)) % {
            "names": ", ".join(sorted(volumes))}
        return gettext("A stop keeps only %(kept)s: %(lost)s.") % {
            "kept": kept, "lost": gettext(LOST_WITH_VOLUMES.get(kind, LOST_WITH_VOLUMES[InstanceKind.CONTAINER]))}
    return gettext("A stop keeps nothing: %(lost)s.") % {
        "lost": gettext(LOST.get(kind, LOST[InstanceKind.CONTAINER]))}


def stop_reason(kind: str, volumes=()) -> str:
    """The state reason a finished stop writes (the API's `state_reason`, the event's reason)."""
    if volumes:
        return (f"stopped: kept {_kept(volumes)}, "
                f"{LOST_WITH_VOLUMES.get(kind, LOST_WITH_VOLUMES[InstanceKind.CONTAINER])}")
    return f"stopped: nothing kept, {LOST.get(kind, LOST[InstanceKind.CONTAINER])}"
