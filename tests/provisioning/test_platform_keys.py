"""The platform's per-instance SSH key: made once per instance (even by two callers at once), sealed at rest,
installed beside the user's keys when the instance is prepared, and a pair that really signs and verifies."""
import threading

import pytest
from cryptography.hazmat.primitives import serialization
from django.db import connection

from provisioning.models import Instance
from provisioning.platform_keys import COMMENT, authorized_keys, platform_private_key, platform_public_key
from provisioning.tasks import instance_advance
from tests.factories.provisioning import InstanceFactory, container_body, make_fleet


@pytest.mark.django_db
def test_the_key_is_made_once_sealed_and_its_halves_match():
    inst = InstanceFactory(ssh_public_keys=["ssh-ed25519 AAAAuser u@laptop"])
    private = platform_private_key(inst)
    assert private.startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    sealed = Instance.objects.values_list("platform_key", flat=True).get(pk=inst.pk)
    assert sealed and "OPENSSH" not in sealed  # encrypted at rest
    assert platform_private_key(Instance.objects.get(pk=inst.pk)) == private  # not made again

    key = serialization.load_ssh_private_key(private.encode(), password=None)
    public = serialization.load_ssh_public_key(platform_public_key(inst).rsplit(" ", 1)[0].encode())
    public.verify(key.sign(b"challenge"), b"challenge")  # raises when the halves do not belong together
    assert platform_public_key(inst).endswith(f" {COMMENT}")
    assert authorized_keys(inst) == ["ssh-ed25519 AAAAuser u@laptop", platform_public_key(inst)]
    other = InstanceFactory()
    assert platform_private_key(other) != private  # one pair per instance


@pytest.mark.django_db(transaction=True)
def test_two_callers_at_once_get_the_same_key():
    inst = InstanceFactory()
    got, barrier = [], threading.Barrier(2)

    def call():
        barrier.wait()
        try:
            got.append(platform_private_key(Instance.objects.get(pk=inst.pk)))
        finally:
            connection.close()

    threads = [threading.Thread(target=call) for _ in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert len(got) == 2 and got[0] == got[1]


@pytest.mark.django_db
def test_a_prepared_instance_was_given_the_users_keys_and_the_platforms(client):
    make_fleet(h100=1)
    r = client.post("/api/v1/instances/", container_body(), format="json")
    assert r.status_code == 201, r.json()
    assert instance_advance(r.json()["id"]) == "running"
    inst = Instance.objects.get(pk=r.json()["id"])
    group = inst.groups.get()
    # The simulated driver says how many keys it installed: the user's plus the platform's.
    assert f"{len(inst.ssh_public_keys) + 1} ssh key(s)" in group.prepare_output
    assert inst.platform_key
