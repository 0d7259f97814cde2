"""The API's areas as attributes of the client: instances, catalog, quotes, billing, ssh_keys."""
from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

from .errors import CardmixError, NotFound, WaitTimeout
from .models import (
    Accelerator,
    Balance,
    Image,
    Instance,
    InstanceEvent,
    Quote,
    ReadinessReport,
    SshKey,
    UsageLine,
    Zone,
)

# States from which an instance will not reach another one by itself.
SETTLED = {"running", "stopped", "failed", "terminated", "waitlisted", "expired"}


class InstanceFailed(CardmixError):
    code = "instance_failed"


class _Area:
    def __init__(self, client):
        self._c = client


class Instances(_Area):
    def list(self, *, state: str | None = None, page_size: int = 100, cursor: bool = True) -> Iterator[Instance]:
        """The organization's instances, newest first (by cursor pages unless `cursor=False`)."""
        params = {"state": state} if state else {}
        for row in self._c.paginate("instances/", params, page_size=page_size, cursor=cursor):
            yield Instance.from_dict(row)

    def get(self, id_or_name: str) -> Instance:
        """By id, or by name when it is not a UUID (a name two instances share is refused)."""
        try:
            uuid.UUID(str(id_or_name))
        except ValueError:
            matches = [i for i in self.list() if i.name == id_or_name and i.state != "terminated"]
            if len(matches) != 1:
                raise NotFound(f"No single live instance is named {id_or_name!r} ({len(matches)} match).") from None
            return matches[0]
        return Instance.from_dict(self._c.request("GET", f"instances/{id_or_name}/"))

    def create(self, *, name: str, items: list | None = None, kind: str = "container", image: str | None = None,
               wait: str | None = None, timeout: float = 900.0, poll: float = 2.0,
               on_state: Callable[[Instance], None] | None = None, idempotency_key: str | None = None,
               **fields) -> Instance:
        """POST /instances/ (with an Idempotency-Key); `wait="running"` polls until it is running."""
        body = {"name": name, "kind": kind, **({"items": items} if items is not None else {}),
                **({"image": image} if image else {}), **{k: v for k, v in fields.items() if v is not None}}
        created = Instance.from_dict(self._c.request("POST", "instances/", json=body, create=True,
                                                     idempotency_key=idempotency_key))
        if on_state:
            on_state(created)
        return self.wait(created.id, wait, timeout=timeout, poll=poll, on_state=on_state) if wait else created

    def wait(self, instance_id: str, state: str = "running", *, timeout: float = 900.0, poll: float = 2.0,
             on_state: Callable[[Instance], None] | None = None) -> Instance:
        """Poll until the instance is in `state`; InstanceFailed when it settles elsewhere, WaitTimeout after
        `timeout` seconds."""
        deadline, seen = time.monotonic() + timeout, None
        while True:
            inst = self.get(instance_id)
            if inst.state != seen and on_state:
                on_state(inst)
            seen = inst.state
            if inst.state == state:
                return inst
            if inst.state in SETTLED and inst.state != "waitlisted":
                raise InstanceFailed(f"Instance {inst.name} is {inst.state}, not {state}: {inst.state_reason}",
                                     details={"state": [inst.state]})
            if time.monotonic() > deadline:
                raise WaitTimeout(f"Instance {inst.name} is still {inst.state} after {timeout:g} s.")
            time.sleep(poll)

    def stop(self, instance_id: str) -> Instance:
        return Instance.from_dict(self._c.request("POST", f"instances/{instance_id}/stop/"))

    def start(self, instance_id: str) -> Instance:
        return Instance.from_dict(self._c.request("POST", f"instances/{instance_id}/start/"))

    def move(self, instance_id: str) -> Instance:
        """A running container with a failed card → placed on healthy cards again (volumes kept)."""
        return Instance.from_dict(self._c.request("POST", f"instances/{instance_id}/move/"))

    def delete(self, instance_id: str) -> Instance:
        return Instance.from_dict(self._c.request("DELETE", f"instances/{instance_id}/"))

    def events(self, instance_id: str) -> Iterator[InstanceEvent]:
        for row in self._c.paginate(f"instances/{instance_id}/events/"):
            yield InstanceEvent.from_dict(row)

    def readiness(self, instance_id: str) -> list[ReadinessReport]:
        return [ReadinessReport.from_dict(r) for r in self._c.paginate(f"instances/{instance_id}/readiness/")]


class Catalog(_Area):
    def accelerators(self) -> list[Accelerator]:
        return [Accelerator.from_dict(r) for r in self._c.paginate("accelerators/")]

    def zones(self) -> list[Zone]:
        return [Zone.from_dict(r) for r in self._c.paginate("zones/")]

    def images(self) -> list[Image]:
        return [Image.from_dict(r) for r in self._c.paginate("images/")]


class Quotes(_Area):
    def create(self, *, items: list | None = None, kind: str = "container", image: str | None = None,
               **fields) -> Quote:
        body = {"kind": kind, **({"items": items} if items is not None else {}), **({"image": image} if image else {}),
                **{k: v for k, v in fields.items() if v is not None}}
        return Quote.from_dict(self._c.request("POST", "quotes/", json=body))


class Billing(_Area):
    def balance(self) -> Balance:
        return Balance.from_dict(self._c.request("GET", "billing/balance/"))

    def usage(self, *, start: str | None = None, end: str | None = None) -> Iterator[UsageLine]:
        params = {k: v for k, v in {"from": start, "to": end}.items() if v}
        for row in self._c.paginate("billing/usage/", params):
            yield UsageLine.from_dict(row)


class SshKeys(_Area):
    def list(self) -> list[SshKey]:
        return [SshKey.from_dict(r) for r in self._c.paginate("ssh-keys/")]

    def create(self, *, name: str, public_key: str) -> SshKey:
        return SshKey.from_dict(self._c.request("POST", "ssh-keys/", json={"name": name, "public_key": public_key},
                                                create=True))
