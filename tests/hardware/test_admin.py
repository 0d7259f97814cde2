"""The operators' hardware admin: agent tokens shown once, credentials and commands neither edited nor deleted,
BMC passwords never rendered back."""
import pytest
from django.utils import timezone

from hardware.models import AgentCommand, NodeCredential
from tenancy.models import AuditEvent
from tests.factories.hardware import agent_node, bmc_credential

pytestmark = pytest.mark.django_db


def test_agent_tokens_credentials_and_commands(operator_client, catalog):
    node, old_secret = agent_node()
    cred = NodeCredential.objects.get(node=node)
    page = operator_client.post("/admin/hardware/agentnode/", {"action": "issue_agent_token", "apply": "1",
                                                               "_selected_action": [str(node.pk)]})
    body = page.content.decode()
    assert page.status_code == 200 and "no-store" in page["Cache-Control"]
    secret = body[body.index("cmxn_"):].split("<")[0].split()[0].strip()
    assert secret != old_secret and len(secret) > 20
    assert AuditEvent.objects.filter(action="node.agent_token_rotate", actor=operator_client.user).exists()
    for url in ("/admin/hardware/agentnode/", f"/admin/hardware/nodecredential/{cred.pk}/change/",
                "/admin/hardware/nodecredential/"):
        shown = operator_client.get(url).content.decode()
        assert secret not in shown and NodeCredential.objects.get(pk=cred.pk).token_hash not in shown
    # The credential keeps the node's saved state; it is rotated, never deleted or edited here.
    assert operator_client.post(f"/admin/hardware/nodecredential/{cred.pk}/delete/", {"post": "yes"}).status_code == 403
    assert 'name="_save"' not in operator_client.get(f"/admin/hardware/nodecredential/{cred.pk}/change/").content.decode()
    command = AgentCommand.objects.create(node=node, kind="prepare", deadline=timezone.now())
    assert operator_client.post(f"/admin/hardware/agentcommand/{command.pk}/delete/", {"post": "yes"}).status_code == 403
    assert NodeCredential.objects.filter(pk=cred.pk).exists() and AgentCommand.objects.filter(pk=command.pk).exists()


def test_bmc_password_is_never_rendered_back(operator_client):
    credential = bmc_credential(password="s3cret-bmc-pw")
    page = operator_client.get(f"/admin/hardware/bmccredential/{credential.pk}/change/").content.decode()
    assert "s3cret-bmc-pw" not in page and bytes(credential.password_encrypted).decode() not in page
    response = operator_client.post(f"/admin/hardware/bmccredential/{credential.pk}/change/",
                                    {"name": credential.name, "username": "root", "password": ""})
    assert response.status_code == 302
    credential.refresh_from_db()
    assert credential.username == "root" and credential.password_encrypted  # kept


def test_a_bmc_credential_a_node_names_is_neither_deleted_nor_renamed(operator_client):
    """Before: deleting (or renaming) the credential a node's bmc_credentials_ref names left its power and boot
    calls without a login, and the delete was not audited."""
    from hardware.models import BmcCredential
    from tests.factories.inventory import NodeFactory

    used, unused = bmc_credential(name="bmc-rack-1"), bmc_credential(name="bmc-spare")
    NodeFactory(bmc_credentials_ref="bmc-rack-1")
    assert operator_client.post(f"/admin/hardware/bmccredential/{used.pk}/delete/", {"post": "yes"}).status_code == 403
    operator_client.post("/admin/hardware/bmccredential/", {"action": "delete_selected", "post": "yes",
                                                            "_selected_action": [str(used.pk)]})
    response = operator_client.post(f"/admin/hardware/bmccredential/{used.pk}/change/",
                                    {"name": "bmc-renamed", "username": "admin", "password": ""})
    assert response.status_code == 302
    assert BmcCredential.objects.filter(pk=used.pk, name="bmc-rack-1").exists()
    assert operator_client.post(f"/admin/hardware/bmccredential/{unused.pk}/delete/", {"post": "yes"}).status_code == 302
    assert not BmcCredential.objects.filter(pk=unused.pk).exists()
    event = AuditEvent.objects.get(action="bmc_credential.delete")
    assert (event.actor_id, event.target_id, event.details) == (operator_client.user.pk, str(unused.pk),
                                                                {"name": "bmc-spare"})


def test_rotating_agent_tokens_asks_first_listing_the_nodes(operator_client, catalog):
    """Before: the bulk action rotated at once — selecting many nodes cut all their agents off with no question."""
    (node_a, _), (node_b, _) = agent_node(), agent_node()
    hashes = dict(NodeCredential.objects.values_list("node_id", "token_hash"))
    ids = [str(node_a.pk), str(node_b.pk)]
    page = operator_client.post("/admin/hardware/agentnode/", {"action": "issue_agent_token", "_selected_action": ids})
    body = page.content.decode()
    assert page.status_code == 200 and node_a.hostname in body and node_b.hostname in body
    assert "cut off" in body and 'name="apply"' in body and "<code>cmxn_" not in body
    assert dict(NodeCredential.objects.values_list("node_id", "token_hash")) == hashes  # nothing rotated yet
    assert not AuditEvent.objects.filter(action="node.agent_token_rotate").exists()
    done = operator_client.post("/admin/hardware/agentnode/", {"action": "issue_agent_token", "apply": "1",
                                                               "_selected_action": ids})
    shown = done.content.decode()
    assert done.status_code == 200 and "no-store" in done["Cache-Control"]
    secrets = {s.split("<")[0] for s in shown.split("<code>cmxn_")[1:]}
    assert len(secrets) == 2  # one new token per node (each also in its start command)
    assert all(h != hashes[n] for n, h in NodeCredential.objects.values_list("node_id", "token_hash"))
    assert AuditEvent.objects.filter(action="node.agent_token_rotate", actor=operator_client.user).count() == 2


def test_a_node_bmc_credentials_ref_must_name_an_existing_bmc_credential(operator_client, catalog):
    """Before: node_update, node_create and the CSV import took any bmc_credentials_ref — a typo only surfaced at
    provisioning ("BMC credential 'bmc-rack-9' not found" when the node was powered). Now it is a validation error
    naming the field, on the node page, the add page and the CSV import (row and field)."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    from core.errors import ValidationFailed
    from inventory import services
    from inventory.models import Node
    from tests.factories.inventory import NodeFactory, ZoneFactory

    bmc_credential(name="bmc-rack-1")
    node = NodeFactory(driver="redfish", bmc_address="https://10.0.0.9")
    url = f"/admin/inventory/node/{node.pk}/change/"
    form = {"driver": "redfish", "ssh_host": node.ssh_host, "ssh_port": "22", "bmc_address": "https://10.0.0.9",
            "cards-TOTAL_FORMS": "0", "cards-INITIAL_FORMS": "0", "cards-MIN_NUM_FORMS": "0",
            "cards-MAX_NUM_FORMS": "1000"}
    response = operator_client.post(url, {**form, "bmc_credentials_ref": "bmc-rack-9"})
    assert response.status_code == 200 and "No BMC credential named &#x27;bmc-rack-9&#x27;" in response.content.decode()
    assert Node.objects.get(pk=node.pk).bmc_credentials_ref == ""
    assert operator_client.post(url, {**form, "bmc_credentials_ref": "bmc-rack-1"}).status_code == 302
    assert Node.objects.get(pk=node.pk).bmc_credentials_ref == "bmc-rack-1"
    with pytest.raises(ValidationFailed) as err:
        services.node_update(node=node, bmc_credentials_ref="bmc-rack-9")
    assert list(err.value.details) == ["bmc_credentials_ref"]
    assert services.node_update(node=node, bmc_credentials_ref="").bmc_credentials_ref == ""  # none is fine

    zone = ZoneFactory(slug="zone-bmc")
    add = {"hostname": "bmc-new.test", "zone": zone.pk, "accelerator": catalog["h100-sxm-80g"].pk, "card_count": 8,
           "driver": "redfish", "ssh_host": "", "ssh_port": 22, "bmc_address": "https://10.0.0.10",
           "bmc_credentials_ref": "bmc-typo"}
    response = operator_client.post("/admin/inventory/node/add/", add)
    assert response.status_code == 200 and "No BMC credential named" in response.content.decode()
    assert not Node.objects.filter(hostname="bmc-new.test").exists()

    csv = (b"hostname,zone,accelerator,driver,bmc_address,bmc_credentials_ref\n"
           b"bmc-1.test,zone-bmc,h100-sxm-80g,redfish,https://10.0.0.11,bmc-rack-1\n"
           b"bmc-2.test,zone-bmc,h100-sxm-80g,redfish,https://10.0.0.12,vault:bmc/rack-2\n")
    response = operator_client.post("/admin/inventory/node/import-csv/",
                                    {"file": SimpleUploadedFile("nodes.csv", csv, content_type="text/csv")})
    assert response.status_code == 200 and "row 3: bmc_credentials_ref" in response.content.decode()
    assert not Node.objects.filter(hostname__startswith="bmc-").exists()
    response = operator_client.post("/admin/inventory/node/import-csv/", {"file": SimpleUploadedFile(
        "nodes.csv", csv.replace(b"vault:bmc/rack-2", b"bmc-rack-1"), content_type="text/csv")})
    assert response.status_code == 302
    assert set(Node.objects.filter(hostname__startswith="bmc-").values_list("bmc_credentials_ref", flat=True)) == {
        "bmc-rack-1"}
