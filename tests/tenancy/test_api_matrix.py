"""SPEC §5 matrix: every tenancy endpoint × every role × both token scopes (bearer tokens), and isolation."""
import pytest

from tenancy.models import Membership, SsoBinding
from tenancy.models_realname import RealNameVerification
from tests.factories.tenancy import SshKeyFactory, UserFactory, ed25519_public_key, make_token

from .conftest import assert_error

pytestmark = pytest.mark.django_db

ROLES = ["owner", "admin", "member", "billing", "viewer"]
EVERY = set(ROLES)

# Written from SPEC §5's table (not derived from tenancy.permissions): which roles may call each
# endpoint, and whether it is a read (so `read` tokens may call it too).
MATRIX = {
    "org_get": ("get", "/api/v1/organizations/current/", EVERY, True, 200),
    "members_list": ("get", "/api/v1/organizations/current/members/", EVERY, True, 200),
    "members_invite": ("post", "/api/v1/organizations/current/members/", {"owner", "admin"}, False, 201),
    "member_patch": ("patch", "/api/v1/organizations/current/members/{member}/", {"owner", "admin"}, False, 200),
    "member_delete": ("delete", "/api/v1/organizations/current/members/{member}/", {"owner", "admin"}, False, 204),
    "tokens_list": ("get", "/api/v1/tokens/", EVERY, True, 200),
    "tokens_create": ("post", "/api/v1/tokens/", EVERY, False, 201),
    "token_delete": ("delete", "/api/v1/tokens/{token}/", EVERY, False, 204),
    "ssh_list": ("get", "/api/v1/ssh-keys/", {"owner", "admin", "member", "viewer"}, True, 200),
    "ssh_create": ("post", "/api/v1/ssh-keys/", {"owner", "admin", "member"}, False, 201),
    "ssh_get": ("get", "/api/v1/ssh-keys/{key}/", {"owner", "admin", "member", "viewer"}, True, 200),
    "ssh_delete": ("delete", "/api/v1/ssh-keys/{key}/", {"owner", "admin", "member"}, False, 204),
    "audit_list": ("get", "/api/v1/audit-events/", {"owner", "admin"}, True, 200),
    "realname_get": ("get", "/api/v1/organizations/current/verification/", EVERY, True, 200),
    "realname_submit": ("post", "/api/v1/organizations/current/verification/", {"owner", "admin"}, False, 201),
    "realname_detail": ("get", "/api/v1/organizations/current/verification/{realname}/", EVERY, True, 200),
    "export": ("get", "/api/v1/organizations/current/export/", {"owner", "admin"}, True, 200),
    # sign-in rules (accounts): owners set them, admins read the SSO bindings
    "org_patch": ("patch", "/api/v1/organizations/current/", {"owner"}, False, 200),
    "sso_list": ("get", "/api/v1/organizations/current/sso-bindings/", {"owner", "admin"}, True, 200),
    "sso_create": ("post", "/api/v1/organizations/current/sso-bindings/", {"owner"}, False, 201),
    "sso_get": ("get", "/api/v1/organizations/current/sso-bindings/{binding}/", {"owner", "admin"}, True, 200),
    "sso_delete": ("delete", "/api/v1/organizations/current/sso-bindings/{binding}/", {"owner"}, False, 204),
}


def _world(member_factory, role):
    actor = member_factory(role=role)
    org = actor.organization
    target = member_factory(role="member", org=org)
    invitee = UserFactory()
    own_token, _ = make_token(actor, name="second")
    key = SshKeyFactory(user=actor.user)
    rejected = RealNameVerification.objects.create(organization=org, kind="individual", legal_name="Li Lei",
                                                   state="rejected", reason="blurred")
    org.real_name_verified_at = None  # so a submission is allowed
    org.save(update_fields=["real_name_verified_at"])
    binding = SsoBinding.objects.create(organization=org, kind="email_domain", value="old.example.edu.cn")
    return actor, {"member": target.pk, "token": own_token.pk, "key": key.pk, "invitee": invitee.email,
                   "realname": rejected.pk, "binding": binding.pk}


def _body(name, ids):
    return {
        "members_invite": {"email": ids["invitee"], "role": "viewer"},
        "member_patch": {"role": "viewer"},
        "tokens_create": {"name": "ci", "scope": "read"},
        "ssh_create": {"name": "laptop", "public_key": ed25519_public_key()},
        "realname_submit": {"kind": "individual", "legal_name": "韩梅梅", "id_number": "11010519491231002X"},
        "org_patch": {"mfa_required": True},
        "sso_create": {"kind": "email_domain", "value": "lab.example.edu.cn", "role": "member"},
    }.get(name)


@pytest.mark.parametrize("scope", ["read", "write"])
@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("name", list(MATRIX))
def test_role_scope_matrix(name, role, scope, member_factory, token_client_for):
    method, path, roles, is_read, ok_status = MATRIX[name]
    actor, ids = _world(member_factory, role)
    client = token_client_for(actor, scope=scope)
    response = getattr(client, method)(path.format(**ids), _body(name, ids), format="json")
    allowed = role in roles and (is_read or scope == "write")
    if allowed:
        assert response.status_code == ok_status, response.content
    else:
        assert_error(response, 403, "permission_denied")


@pytest.mark.parametrize("name", list(MATRIX))
def test_no_credentials_is_401(name, api_client, member_factory):
    method, path, *_ = MATRIX[name]
    _, ids = _world(member_factory, "owner")
    assert_error(getattr(api_client, method)(path.format(**ids), {}, format="json"), 401, "not_authenticated")


def test_current_org_reports_role_and_quota(member_factory, token_client_for, settings):
    actor = member_factory(role="billing")
    body = token_client_for(actor, scope="read").get("/api/v1/organizations/current/").json()
    assert body["id"] == str(actor.organization_id)
    assert body["role"] == "billing"
    assert body["card_quota"] == settings.DEFAULT_CARD_QUOTA


def test_session_client_gets_the_same_answers(member_factory, session_client_for):
    actor = member_factory(role="viewer")
    client = session_client_for(actor)
    assert client.get("/api/v1/organizations/current/").json()["role"] == "viewer"
    assert_error(client.get("/api/v1/audit-events/"), 403, "permission_denied")
    assert client.post("/api/v1/tokens/", {"name": "x"}, format="json").status_code == 201


def test_other_organizations_ids_answer_404_everywhere(member_factory, token_client_for):
    mine = member_factory(role="owner")
    theirs = member_factory(role="owner")
    their_member = member_factory(role="member", org=theirs.organization)
    their_token, _ = make_token(theirs)
    their_key = SshKeyFactory(user=theirs.user)
    # The same user in a second organization: that organization's token is not reachable from the first.
    second = member_factory(role="owner")
    Membership.objects.create(organization=second.organization, user=mine.user, role="owner")
    my_other_org_token, _ = make_token(Membership.objects.get(organization=second.organization, user=mine.user))
    client = token_client_for(mine)
    member_url = f"/api/v1/organizations/current/members/{their_member.pk}/"
    for method, url, body in [
        ("get", member_url, None),
        ("patch", member_url, {"role": "viewer"}),
        ("delete", member_url, None),
        ("get", f"/api/v1/tokens/{their_token.pk}/", None),
        ("delete", f"/api/v1/tokens/{their_token.pk}/", None),
        ("delete", f"/api/v1/tokens/{my_other_org_token.pk}/", None),
        ("get", f"/api/v1/ssh-keys/{their_key.pk}/", None),
        ("delete", f"/api/v1/ssh-keys/{their_key.pk}/", None),
    ]:
        assert_error(getattr(client, method)(url, body, format="json"), 404, "not_found")
    # Nothing was changed, and lists never show the other tenant's rows.
    their_member.refresh_from_db()
    assert their_member.role == "member"
    their_token.refresh_from_db()
    assert their_token.revoked_at is None
    ids = {r["id"] for r in client.get("/api/v1/organizations/current/members/").json()["results"]}
    assert str(their_member.pk) not in ids
    assert str(their_key.pk) not in {r["id"] for r in client.get("/api/v1/ssh-keys/").json()["results"]}
    assert str(my_other_org_token.pk) not in {r["id"] for r in client.get("/api/v1/tokens/").json()["results"]}
