"""What a stop keeps, per instance kind: the one source of the API's stop reason, the console's sentences and the
emails, so none of them promises a disk the fleet does not keep.

A container's stop removes the container (the agent's `docker rm`, and its state for it): its disk goes with it.
There are no volumes yet, so a container keeps nothing; when volumes land, the volumes attached to it are what a
stop keeps, and this module is where they are named. A bare-metal instance's nodes are released to node
cleaning, which wipes their disks before another tenant gets them: it keeps nothing either.
"""
from .choices import InstanceKind

# What a stop does to what the instance had on disk; "nothing is kept" follows from it for every kind today.
LOST = {
    InstanceKind.CONTAINER: "its container is deleted with its disk (no volume is attached)",
    InstanceKind.BARE_METAL: "its nodes are wiped when released",
}


def stop_keeps(kind: str) -> str:
    """What survives a stop of an instance of `kind`, as a sentence for people (emails, console)."""
    return f"A stop keeps nothing: {LOST.get(kind, LOST[InstanceKind.CONTAINER])}."


def stop_reason(kind: str) -> str:
    """The state reason a finished stop writes (the API's `state_reason`, the event's reason)."""
    return f"stopped: nothing kept, {LOST.get(kind, LOST[InstanceKind.CONTAINER])}"
