"""The SSH gateway's decisions on PostgreSQL (provisioning/gateway/access.py): which instance a login name or a -J
destination names, for whom, and when an open session must end. The live test drives the same through OpenSSH."""
import base64

import pytest

from provisioning.endpoints import gateway_entry, short_id
from provisioning.gateway.access import Refused, logins_for_key, session_refusal, target_for
from provisioning.models import NodeGroup
from tests.factories.provisioning import InstanceFactory, make_fleet
from tests.factories.tenancy import SshKeyFactory

pytestmark = pytest.mark.django_db


def _blob(key) -> bytes:
    return base64.b64decode(key.public_key.split()[1])


def _running(org, node, name="trainer", state="running"):
    inst = InstanceFactory(organization=org, name=name, state=state)
    NodeGroup.objects.create(instance=inst, item_index=0, accelerator="h100-sxm-80g", node=node, card_indices=[2],
                             card_ids=[], ssh_port=30002)
    return inst


@pytest.fixture
def node(db):
    return make_fleet(h100=1)[0]


def test_a_registered_key_names_its_user_and_reaches_instances_by_name_short_id_and_id(member_factory, node):
    owner = member_factory(role="owner")
    key = SshKeyFactory(user=owner.user)
    inst = _running(owner.organization, node)
    logins = logins_for_key(_blob(key))
    assert [(lg.user_id, lg.key_id, lg.fingerprint) for lg in logins] == [
        (str(owner.user_id), str(key.pk), key.fingerprint)]
    for ref in ("trainer", short_id(inst.pk), str(inst.pk)):
        login, target = target_for(logins, ref)
        assert (login.user_id, target.instance_id, target.port, target.user) == (
            str(owner.user_id), str(inst.pk), 30002, "root")
        assert target.private_key.startswith("-----BEGIN OPENSSH PRIVATE KEY-----")  # the platform's, never a user's
    assert logins_for_key(_blob(SshKeyFactory.build())) == []  # a key nobody registered


def test_refusals_say_why_and_another_organizations_instance_does_not_exist(member_factory, node):
    owner = member_factory(role="owner")
    inst = _running(owner.organization, node)
    stranger = logins_for_key(_blob(SshKeyFactory(user=member_factory(role="owner").user)))
    for ref in ("trainer", short_id(inst.pk), str(inst.pk), "nonexistent", ""):
        with pytest.raises(Refused, match="No instance"):
            target_for(stranger, ref)
    viewer = logins_for_key(_blob(SshKeyFactory(user=member_factory(role="viewer", org=owner.organization).user)))
    with pytest.raises(Refused, match="role does not allow"):
        target_for(viewer, "trainer")
    billing = logins_for_key(_blob(SshKeyFactory(user=member_factory(role="billing", org=owner.organization).user)))
    with pytest.raises(Refused, match="role does not allow"):
        target_for(billing, short_id(inst.pk))
    mine = logins_for_key(_blob(SshKeyFactory(user=owner.user)))
    _running(owner.organization, node, name="parked", state="stopped")
    with pytest.raises(Refused, match="parked is stopped"):
        target_for(mine, "parked")


def test_a_name_in_two_of_ones_organizations_asks_for_the_short_id(member_factory, node):
    first = member_factory(role="owner")
    second = member_factory(role="member", user=first.user)
    a, b = _running(first.organization, node), _running(second.organization, node)
    logins = logins_for_key(_blob(SshKeyFactory(user=first.user)))
    with pytest.raises(Refused, match="more than one instance") as refused:
        target_for(logins, "trainer")
    assert short_id(a.pk) in str(refused.value) and short_id(b.pk) in str(refused.value)
    assert target_for(logins, short_id(b.pk))[1].instance_id == str(b.pk)
    # A stopped namesake in the same organization does not hide the running one.
    _running(first.organization, node, name="solo", state="stopped")
    running = _running(first.organization, node, name="solo")
    assert target_for(logins, "solo")[1].instance_id == str(running.pk)


def test_an_open_session_ends_when_its_key_membership_role_or_instance_does(member_factory, node):
    owner = member_factory(role="owner")
    member = member_factory(role="member", org=owner.organization)
    key = SshKeyFactory(user=member.user)
    inst = _running(owner.organization, node)
    login, target = target_for(logins_for_key(_blob(key)), "trainer")
    assert session_refusal(login, target) is None and session_refusal(login, None) is None
    member.role = "viewer"
    member.save()
    assert session_refusal(login, target) == "no longer a member who may use the instance"
    member.role = "member"
    member.save()
    inst.state = "stopping"
    inst.save()
    assert session_refusal(login, target) == "instance stopping"
    key.delete()
    assert session_refusal(login, target) == session_refusal(login, None) == "key removed"


def test_the_body_shows_the_gateway_form_only_where_there_is_an_sshd(settings):
    settings.SSH_GATEWAY_PUBLIC_HOST, settings.SSH_GATEWAY_PUBLIC_PORT = "gw.example.com", 22
    direct = [{"node": "n1", "host": "10.0.0.1", "port": 30002, "user": "root", "command": "ssh -p 30002 root@10.0.0.1"}]
    iid = "1234abcd-0000-4000-8000-000000000000"
    assert gateway_entry(iid, "trainer", direct) == {
        "host": "gw.example.com", "port": 22, "user": "1234abcd", "command": "ssh 1234abcd@gw.example.com",
        "jump": "ssh -J gw.example.com root@i-1234abcd",
        "config": "Host trainer\n  HostName i-1234abcd\n  User root\n  ProxyJump gw.example.com\n"
                  "  ServerAliveInterval 30\n"}
    assert gateway_entry(iid, "trainer", []) is None
    settings.SSH_GATEWAY_PUBLIC_HOST = ""
    assert gateway_entry(iid, "trainer", direct) is None


def test_a_multi_node_instance_is_reached_on_each_part_by_its_index(member_factory):
    nodes = make_fleet(h100=2)
    owner = member_factory(role="owner")
    logins = logins_for_key(_blob(SshKeyFactory(user=owner.user)))
    inst = InstanceFactory(organization=owner.organization, name="pair", state="running")
    groups = [NodeGroup.objects.create(instance=inst, item_index=0, accelerator="h100-sxm-80g", node=node,
                                       card_indices=[0], card_ids=[], ssh_port=30000 + i)
              for i, node in enumerate(nodes)]
    short = short_id(inst.pk)
    for ref, group in ((short, groups[0]), (f"{short}-0", groups[0]), (f"{short}-1", groups[1]),
                       ("pair-1", groups[1]), (str(inst.pk) + "-1", groups[1])):
        _, target = target_for(logins, ref)
        assert (target.group_id, target.port, target.host) == (group.pk, group.ssh_port,
                                                               group.node.ssh_host or group.node.hostname), ref
    with pytest.raises(Refused, match="parts 0 to 1"):
        target_for(logins, f"{short}-2")
    # A name that itself ends in -<n> is that instance, not a part of another.
    named = _running(owner.organization, nodes[0], name="pair-1")
    assert target_for(logins, "pair-1")[1].instance_id == str(named.pk)
    stranger = logins_for_key(_blob(SshKeyFactory(user=member_factory(role="owner").user)))
    with pytest.raises(Refused, match="No instance"):
        target_for(stranger, f"{short}-1")
