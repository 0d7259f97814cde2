"""Account deletion: the blockers, the password and the emailed link, then no row anywhere holds the person's
email or name, the ledger still verifies, the trial is not earned twice, and the account no longer logs in."""
import re

import pytest
from allauth.account.models import EmailAddress
from django.core import mail
from django.core.management import call_command
from django.db import connection

from billing.models_fapiao import FapiaoRequest
from privacy.deletion import account_delete, deletion_blockers
from tenancy.models import AuditEvent, Membership, Organization, TrialClaim, User
from tenancy.services import member_invite, user_mark_verified, user_signup
from tests.factories.billing import fund
from tests.factories.provisioning import InstanceFactory
from tests.factories.tenancy import PASSWORD, MembershipFactory, SshKeyFactory, login_client, make_token

pytestmark = pytest.mark.django_db
EMAIL, NAME = "zephyrine.quill@example.org", "Zephyrine Quillfeather"


def rows_holding(needle: str) -> list[tuple[str, str]]:
    """(table, column) of every text or JSON column of the database that holds `needle`, case-insensitively —
    read straight from the catalog, not from the models, so a table the deletion forgot is found too."""
    with connection.cursor() as cur:
        cur.execute("SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = "
                    "current_schema() AND data_type IN ('text', 'character varying', 'json', 'jsonb')")
        columns = cur.fetchall()
        found = []
        for table, column in columns:
            cur.execute(f'SELECT count(*) FROM "{table}" WHERE "{column}"::text ILIKE %s', [f"%{needle}%"])
            if cur.fetchone()[0]:
                found.append((table, column))
    return found


@pytest.fixture
def person(member_factory, django_capture_on_commit_callbacks):
    """A person signed up and verified (trial claimed), owner of their personal organization and a member of a
    lab whose owner invited them; their name and address spread over keys, tokens, audit rows, an instance's
    authorized keys, a fapiao request and a failed login."""
    user = user_signup(email=EMAIL, password=PASSWORD, name=NAME)
    user_mark_verified(user=user)
    EmailAddress.objects.create(user=user, email=EMAIL, primary=True, verified=True)  # as allauth's sign-up leaves it
    personal = Membership.objects.get(user=user).organization
    fund(personal, 50_000_000, key=f"deletion:{personal.pk}")
    lab_owner = member_factory(role="owner")
    with django_capture_on_commit_callbacks(execute=True):
        membership = member_invite(actor_membership=lab_owner, email=EMAIL, role="member")
    key = SshKeyFactory(user=user, name="laptop")
    make_token(membership, name="ci")
    InstanceFactory(organization=lab_owner.organization, creator=user, state="running",
                    ssh_public_keys=[key.public_key + f" {EMAIL}"])
    InstanceFactory(organization=personal, creator=user, state="terminated", name=f"{NAME}'s notebook")
    FapiaoRequest.objects.create(organization=personal, requested_by=user, kind="normal", amount=10_000_000,
                                 title=NAME, email=EMAIL)
    login_client(membership).post("/login/", {"username": EMAIL, "password": "wrong"})
    return user, personal, lab_owner


def test_deletion_erases_the_person_everywhere_and_keeps_the_ledger(person, django_capture_on_commit_callbacks):
    user, personal, lab_owner = person
    assert rows_holding(EMAIL) and rows_holding(NAME)  # the check can fail
    web = login_client(Membership.objects.filter(user=user).first())
    page = web.get("/account/delete/").content.decode()
    assert 'id="account-delete-form"' in page
    wrong = web.post("/account/delete/", {"password": "not-it"})
    assert "The password is not right." in wrong.content.decode() and not mail.outbox
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert web.post("/account/delete/", {"password": PASSWORD}).status_code == 302
    (sent,) = mail.outbox
    assert sent.to == [EMAIL] and "24 hours" in sent.body
    link = re.search(r"https?://\S+/account/delete/(\S+)/", sent.body)
    confirm = f"/account/delete/{link.group(1)}/"
    assert "Delete the account" in web.get(confirm).content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        done = web.post(confirm)
    assert done.status_code == 200 and 'id="account-deleted"' in done.content.decode()
    assert mail.outbox[-1].to == [EMAIL] and "was deleted" in mail.outbox[-1].subject

    assert rows_holding(EMAIL) == [] and rows_holding(NAME) == []
    user.refresh_from_db()
    assert not user.is_active and not user.has_usable_password() and user.email.endswith("@deleted.invalid")
    assert not Membership.objects.filter(user=user).exists()
    personal.refresh_from_db()
    assert personal.name.startswith("Deleted organization") and Membership.objects.filter(
        organization=lab_owner.organization).count() == 1
    # Kept rows still point at the (anonymised) user: the audit log and the instances they made.
    assert AuditEvent.objects.filter(actor=user, action="user.delete").exists()
    assert personal.instances.get().creator == user
    call_command("verify_ledger")  # raises CommandError on any difference
    assert web.get(confirm).status_code == 400  # the link is spent: the address is gone
    assert not User.objects.filter(email=EMAIL).exists()


def test_the_same_mailbox_never_earns_a_second_trial(person):
    user, *_ = person
    assert TrialClaim.objects.filter(user=user).count() == 1
    account_delete(user=user)  # the running instance is the lab's, which keeps its owner: no blocker
    assert TrialClaim.objects.filter(email__icontains="zephyrine").count() == 0
    again = user_signup(email=EMAIL, password=PASSWORD, name="Z")
    user_mark_verified(user=again)
    assert TrialClaim.objects.filter(user=again).count() == 0  # the erased claim still holds the mailbox


def test_blockers_are_named_and_nothing_is_deleted(person, member_factory, django_capture_on_commit_callbacks):
    user, personal, lab_owner = person
    InstanceFactory(organization=personal, state="running")
    colleague = MembershipFactory(organization=Organization.objects.create(name="Solo Lab", slug="solo-lab"),
                                  role="owner", user=user)
    member_factory(role="member", org=colleague.organization)
    reasons = deletion_blockers(user)
    assert any("1 instance(s) not terminated" in r for r in reasons)
    assert any("only owner of Solo Lab" in r for r in reasons)
    web = login_client(colleague)
    page = web.get("/account/delete/").content.decode()
    assert 'id="deletion-blockers"' in page and 'id="account-delete-form"' not in page
    with pytest.raises(Exception, match="cannot be deleted yet"):
        account_delete(user=user)
    user.refresh_from_db()
    assert user.email == EMAIL and user.is_active


def test_a_forged_or_expired_link_deletes_nothing(person):
    user, *_ = person
    from django.test import Client

    r = Client().post("/account/delete/not-a-token/")
    assert r.status_code == 400 and "invalid or has expired" in r.content.decode()
    assert User.objects.get(pk=user.pk).email == EMAIL
