"""An organization's private images through /api/v1/custom-images/, against a real registry on loopback (Debian's
docker-registry with htpasswd): a reference that exists is accepted with its digest, one that does not is a 400
naming `reference`, wrong or missing credentials a 400 naming `credentials`; the login is sealed at rest and never
shown again; another organization's image is a 404 and cannot be run; register and delete are audited."""
import pytest

from hardware.models import AgentCommand
from inventory.custom_images import pull_auth, secret_unseal
from inventory.models import CustomImage
from tenancy.models import AuditEvent
from tests.factories.hardware import agent_node
from tests.factories.inventory import custom_image
from tests.factories.provisioning import container_body, funded, make_fleet

pytestmark = pytest.mark.django_db
URL = "/api/v1/custom-images/"


@pytest.fixture
def owner(member_factory, token_client_for):
    membership = funded(member_factory(role="owner"))
    return membership, token_client_for(membership)


def test_a_reference_that_exists_is_kept_with_its_digest_and_a_sealed_login(owner, image_registry):
    membership, client = owner
    digest, size = image_registry.push("team/trainer", "1.0", "amd64")
    r = client.post(URL, {"name": "trainer", "reference": f"{image_registry.host}/team/trainer:1.0",
                          "username": "puller", "password": "right-pass"}, format="json")
    assert r.status_code == 201, r.json()
    body = r.json()
    assert (body["digest"], body["architectures"], body["vendors"]) == (digest, ["amd64"], ["nvidia"])
    assert body["size_bytes"] == size and body["credentials"] == "set" and body["state"] == "ready"
    assert "password" not in body and "right-pass" not in r.content.decode()
    row = CustomImage.objects.get(pk=body["id"])
    assert b"right-pass" not in bytes(row.password_encrypted) and secret_unseal(row.password_encrypted) == "right-pass"
    # Never shown again: not in the list nor the detail.
    for page in (client.get(URL), client.get(f"{URL}{row.pk}/")):
        assert page.status_code == 200 and "right-pass" not in page.content.decode()
    assert client.get(URL).json()["results"][0]["credentials"] == "set"
    audit = AuditEvent.objects.get(action="custom_image.register", organization=membership.organization)
    assert audit.details["digest"] == digest and audit.details["credentials"] is True
    assert "right-pass" not in str(audit.details)


def test_each_refusal_names_the_field_and_keeps_nothing(owner, image_registry):
    _, client = owner
    image_registry.push("team/trainer", "1.0", "amd64")
    host = image_registry.host
    cases = [
        ({"reference": f"{host}/team/trainer:9.9", "username": "puller", "password": "right-pass"}, "reference",
         "does not exist"),
        ({"reference": f"{host}/team/trainer:1.0", "username": "puller", "password": "wrong"}, "credentials",
         "refused these credentials"),
        ({"reference": f"{host}/team/trainer:1.0"}, "credentials", "needs pull credentials"),
        ({"reference": f"{host}/team/trainer:1.0", "username": "puller", "password": "right-pass",
          "vendors": ["huawei"]}, "reference", "built for amd64, not arm64"),
        ({"reference": "Not A Reference"}, "reference", "Write the image as"),
        ({"reference": f"{host}/team/trainer:1.0", "password": "right-pass"}, "username", "username"),
    ]
    for extra, field, says in cases:
        r = client.post(URL, {"name": "trainer", **extra}, format="json")
        assert r.status_code == 400, (extra, r.json())
        error = r.json()["error"]
        assert error["code"] == "validation_error" and says in " ".join(error["details"][field]), (extra, error)
    assert not CustomImage.objects.exists()


def test_another_organizations_image_is_404_and_cannot_be_run(owner, member_factory, token_client_for, catalog):
    membership, client = owner
    make_fleet(h100=1)
    other = funded(member_factory(role="owner"))
    theirs = custom_image(other.organization, name="theirs")
    assert client.get(f"{URL}{theirs.pk}/").status_code == 404
    assert client.delete(f"{URL}{theirs.pk}/").status_code == 404
    assert client.get(f"{URL}not-a-uuid/").status_code == 404
    assert CustomImage.objects.filter(pk=theirs.pk).exists()
    r = client.post("/api/v1/instances/", container_body(image=str(theirs.pk)), format="json")
    assert r.status_code == 400 and "Unknown image" in r.json()["error"]["details"]["image"][0], r.json()

    ours = custom_image(membership.organization, name="ours")
    r = client.post("/api/v1/instances/", container_body(image=str(ours.pk)), format="json")
    assert r.status_code == 201, r.json()
    assert r.json()["image"] == str(ours.pk)
    bare = client.post("/api/v1/instances/", {**container_body(count=8, image=str(ours.pk)), "kind": "bare_metal"},
                       format="json")
    assert bare.status_code == 400 and "private container image" in str(bare.json()["error"]["details"])
    # The owner of the other image runs it.
    r = token_client_for(other).post("/api/v1/instances/", container_body(image=str(theirs.pk)), format="json")
    assert r.status_code == 201, r.json()


def test_delete_is_audited_and_the_image_is_gone(owner):
    membership, client = owner
    image = custom_image(membership.organization)
    r = client.delete(f"{URL}{image.pk}/")
    assert r.status_code == 204
    assert not CustomImage.objects.filter(pk=image.pk).exists()
    audit = AuditEvent.objects.get(action="custom_image.delete", organization=membership.organization)
    assert audit.details["name"] == "trainer" and audit.target_id == str(image.pk)


def test_viewers_read_but_cannot_register_or_delete(member_factory, token_client_for):
    viewer = member_factory(role="viewer")
    image = custom_image(viewer.organization)
    client = token_client_for(viewer)
    assert client.get(URL).json()["results"][0]["id"] == str(image.pk)
    assert client.post(URL, {"name": "x", "reference": "a/b"}, format="json").status_code == 403
    assert client.delete(f"{URL}{image.pk}/").status_code == 403


def test_the_login_travels_sealed_and_is_opened_only_for_the_nodes_agent(owner, api_client):
    """The command row keeps the sealed text; the node's agent, claiming it, gets the password."""
    membership, _ = owner
    image = custom_image(membership.organization, password="pull-s3cret")
    node, token = agent_node(hostname="gpu-private-01.test")
    other_node, other_token = agent_node(hostname="gpu-private-02.test")
    AgentCommand.objects.create(node=node, kind="prepare", deadline="2999-01-01T00:00:00Z",
                                payload={"kind": "container", "image": image.reference,
                                         "registry_auth": pull_auth(image)})
    row = AgentCommand.objects.get(node=node)
    assert "pull-s3cret" not in str(row.payload) and row.payload["registry_auth"]["sealed"]
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {other_token}")
    assert api_client.get("/api/v1/agent/commands/").json()["results"] == []  # another node gets nothing
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    [handed] = api_client.get("/api/v1/agent/commands/").json()["results"]
    assert handed["payload"]["registry_auth"] == {"registry": "registry.example.com", "username": "puller",
                                                  "password": "pull-s3cret"}
    assert "pull-s3cret" not in str(AgentCommand.objects.get(node=node).payload)


def test_the_node_pulls_the_checked_digest_under_dockers_own_names():
    from inventory.custom_images import pull_auth_unseal, pull_reference, secret_seal

    digest = "sha256:" + "b" * 64
    cases = {"ubuntu:22.04": f"docker.io/library/ubuntu:22.04@{digest}",
             "127.0.0.1:5000/team/x:1": f"127.0.0.1:5000/team/x:1@{digest}",
             "reg.example.com/a/b@sha256:" + "a" * 64: "reg.example.com/a/b@sha256:" + "a" * 64}
    for reference, pulled in cases.items():
        assert pull_reference(CustomImage(reference=reference, digest=digest)) == pulled
    hub = CustomImage(reference="pytorch/pytorch:2.3", username="me", password_encrypted=secret_seal("tok"))
    assert pull_auth_unseal(pull_auth(hub)) == {"registry": "docker.io", "username": "me", "password": "tok"}
    assert pull_auth(CustomImage(reference="reg.example.com/a/b:1")) is None  # a public image: no login
