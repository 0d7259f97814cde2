"""API tokens and SSH keys: refusals with the documented codes, shown-once secrets, fingerprints."""
import base64
import hashlib
from datetime import timedelta

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, rsa
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from tenancy.models import ApiToken, Membership, SshKey, User
from tenancy.token_secrets import token_hash
from tests.factories.tenancy import ed25519_public_key, make_token

from .conftest import assert_error

pytestmark = pytest.mark.django_db
ORG = "/api/v1/organizations/current/"


def bearer(secret):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def openssh(public_key) -> str:
    return public_key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


def test_token_creation_shows_secret_once_and_stores_only_hash(member_factory, token_client_for):
    client = token_client_for(member_factory(role="viewer"))
    response = client.post("/api/v1/tokens/", {"name": "ci", "scope": "read"}, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert response.status_code == 201
    body = response.json()
    assert set(body) == {"id", "name", "scope", "prefix", "token", "created_at", "expires_at", "last_used_at"}
    secret = body["token"]
    assert secret.startswith("cmx_") and len(secret) >= 4 + 43 and body["prefix"] == secret[:12]
    row = ApiToken.objects.get(pk=body["id"])
    assert row.token_hash == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in str(ApiToken.objects.filter(pk=row.pk).values().first())
    # A replayed creation answers the metadata with the secret redacted, and creates nothing.
    replay = client.post("/api/v1/tokens/", {"name": "ci", "scope": "read"}, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert replay.status_code == 201 and replay.json()["token"] is None and replay.json()["id"] == body["id"]
    assert ApiToken.objects.filter(name="ci").count() == 1
    # The new read token works for reads only.
    assert bearer(secret).get(ORG).status_code == 200
    assert_error(bearer(secret).post("/api/v1/tokens/", {"name": "x"}, format="json"), 403, "permission_denied")
    # Secrets never appear in token listings.
    assert "token" not in client.get("/api/v1/tokens/").json()["results"][0]


def test_token_create_validation(member_factory, token_client_for):
    client = token_client_for(member_factory())
    err = assert_error(client.post("/api/v1/tokens/", {"scope": "admin"}, format="json"), 400, "validation_error")
    assert "name" in err["details"] and "scope" in err["details"]
    past = (timezone.now() - timedelta(hours=1)).isoformat()
    err = assert_error(client.post("/api/v1/tokens/", {"name": "x", "expires_at": past}, format="json"),
                       400, "validation_error")
    assert "expires_at" in err["details"]


def test_expired_revoked_forged_malformed_and_removed_member_tokens_are_401(member_factory, token_client_for):
    owner = member_factory(role="owner")
    _, expired = make_token(owner, expires_at=timezone.now() - timedelta(seconds=1))
    _, revoked = make_token(owner, revoked_at=timezone.now())
    assert_error(bearer(expired).get(ORG), 401, "token_invalid")
    assert_error(bearer(revoked).get(ORG), 401, "token_invalid")
    assert_error(bearer("cmx_" + "A" * 43).get(ORG), 401, "token_invalid")  # forged
    assert_error(bearer("not-a-cardmix-token").get(ORG), 401, "token_invalid")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer")
    assert_error(client.get(ORG), 401, "token_invalid")
    # A future expiry still works; revoking through the API stops it at once.
    live_client = token_client_for(owner)
    token, live = make_token(owner, expires_at=timezone.now() + timedelta(hours=1))
    assert bearer(live).get(ORG).status_code == 200
    assert live_client.delete(f"/api/v1/tokens/{token.pk}/").status_code == 204
    assert_error(bearer(live).get(ORG), 401, "token_invalid")
    # A member removed from the organization: their token stops working.
    leaver = member_factory(role="member", org=owner.organization)
    _, leaver_secret = make_token(leaver)
    assert bearer(leaver_secret).get(ORG).status_code == 200
    assert live_client.delete(f"/api/v1/organizations/current/members/{leaver.pk}/").status_code == 204
    assert_error(bearer(leaver_secret).get(ORG), 401, "token_invalid")
    # ...even if the row were not revoked (membership is checked on every request).
    stranger = member_factory(role="member")
    stray_token, stray = make_token(stranger)
    Membership.objects.filter(pk=stranger.pk).delete()
    assert ApiToken.objects.get(pk=stray_token.pk).revoked_at is None
    assert_error(bearer(stray).get(ORG), 401, "token_invalid")


def test_last_used_at_written_at_most_once_a_minute(member_factory, token_client_for):
    client = token_client_for(member_factory())
    token = client.token
    assert token.last_used_at is None
    client.get(ORG)
    token.refresh_from_db()
    first = token.last_used_at
    assert first is not None
    client.get(ORG)
    token.refresh_from_db()
    assert token.last_used_at == first
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=first - timedelta(minutes=2))
    client.get(ORG)
    token.refresh_from_db()
    assert token.last_used_at > first - timedelta(minutes=2)


def test_token_throttle(member_factory, token_client_for, monkeypatch):
    from tenancy.throttles import TokenRateThrottle

    monkeypatch.setattr(TokenRateThrottle, "THROTTLE_RATES", {**TokenRateThrottle.THROTTLE_RATES, "token": "3/min"})
    client = token_client_for(member_factory())
    assert [client.get(ORG).status_code for _ in range(3)] == [200, 200, 200]
    response = client.get(ORG)
    assert_error(response, 429, "throttled")
    assert int(response["Retry-After"]) >= 1
    # Another token has its own budget.
    assert token_client_for(member_factory()).get(ORG).status_code == 200


def test_ssh_keys_accepted_types_and_fingerprint(member_factory, token_client_for):
    client = token_client_for(member_factory(role="member"))
    ed = ed25519_public_key("me@laptop")
    response = client.post("/api/v1/ssh-keys/", {"name": "laptop", "public_key": ed}, format="json")
    assert response.status_code == 201, response.content
    blob = base64.b64decode(ed.split()[1])
    expected = "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    assert response.json()["fingerprint"] == expected
    assert set(response.json()) >= {"id", "name", "fingerprint", "created_at"}
    for key in (ec.generate_private_key(ec.SECP256R1()).public_key(),
                rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()):
        assert client.post("/api/v1/ssh-keys/", {"name": "k", "public_key": openssh(key)},
                           format="json").status_code == 201
    # The same key twice → 400 naming the problem.
    err = assert_error(client.post("/api/v1/ssh-keys/", {"name": "again", "public_key": ed}, format="json"),
                       400, "validation_error")
    assert "public_key" in err["details"]
    assert SshKey.objects.filter(user=client.token.user).count() == 3


@pytest.mark.parametrize("case", ["garbage", "bad_base64", "rsa1024", "dsa", "private_pem", "two_lines", "empty",
                                  "nul_in_comment"])
def test_ssh_keys_refused(case, member_factory, token_client_for):
    ed = ed25519_public_key()
    keys = {
        "garbage": "hello world",
        "bad_base64": "ssh-ed25519 AAAA!!!notbase64 me",
        "rsa1024": openssh(rsa.generate_private_key(public_exponent=65537, key_size=1024).public_key()),
        "dsa": openssh(dsa.generate_private_key(key_size=1024).public_key()),
        "private_pem": "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----",
        "two_lines": ed + "\n" + ed25519_public_key(),
        "empty": "   ",
        "nul_in_comment": ed25519_public_key("bad\x00comment"),
    }
    client = token_client_for(member_factory())
    err = assert_error(client.post("/api/v1/ssh-keys/", {"name": "k", "public_key": keys[case]}, format="json"),
                       400, "validation_error")
    assert err["details"].get("public_key"), err
    if case == "rsa1024":
        assert "2048" in err["details"]["public_key"][0] and "1024" in err["details"]["public_key"][0]
    assert not SshKey.objects.exists()


def test_ssh_keys_are_the_users_in_every_org(member_factory, token_client_for):
    first = member_factory(role="member")
    second = member_factory(role="member")
    Membership.objects.filter(pk=second.pk).update(user=first.user)
    second.refresh_from_db()
    created = token_client_for(first).post("/api/v1/ssh-keys/", {"name": "k", "public_key": ed25519_public_key()},
                                           format="json").json()
    listed = token_client_for(second).get("/api/v1/ssh-keys/").json()["results"]
    assert [k["id"] for k in listed] == [created["id"]]


def test_issue_token_command_creates_verified_user_with_trial(trial_calls, capsys):
    call_command("issue_token", "--email", " New.User@Example.COM ", "--create-user", "--scope", "read")
    secret = capsys.readouterr().out.strip()
    user = User.objects.get(email="new.user@example.com")
    assert user.email_verified_at is not None
    assert trial_calls == [(Membership.objects.get(user=user).organization_id, user.email)]
    body = bearer(secret).get(ORG).json()
    assert body["role"] == "owner" and body["is_personal"] is True
    # A second token for the same user, by org slug; no second trial.
    call_command("issue_token", "--email", "new.user@example.com", "--org", body["slug"])
    assert bearer(capsys.readouterr().out.strip()).get(ORG).status_code == 200
    assert len(trial_calls) == 1
    assert ApiToken.objects.get(token_hash=token_hash(secret)).scope == "read"


def test_a_token_is_checked_in_one_statement_with_its_whole_membership(member_factory):
    """Every API request authenticates (the scale goals, SPEC §13: a stop request's round trips): the token,
    its user, organization and membership come from one statement, and the membership is complete (no column
    left to load later)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tenancy.selectors import token_authenticate

    admin = member_factory(role="admin")
    token, secret = make_token(admin)
    with CaptureQueriesContext(connection) as statements:
        found, membership = token_authenticate(token_hash=token_hash(secret))
        assert (membership.pk, membership.role, membership.created_at) == (admin.pk, "admin", admin.created_at)
        assert (membership.organization, membership.user) == (admin.organization, admin.user)
        assert membership.get_deferred_fields() == set()
    assert found == token and len(statements.captured_queries) == 1
    membership.role = "member"
    membership.save()
    assert Membership.objects.get(pk=admin.pk).role == "member"  # a row of the table, saved in place
