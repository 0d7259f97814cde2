"""`make run` seeds a demo login, the fleet and two instances through the real services."""
import pytest
from django.core.management import call_command


@pytest.mark.pg
@pytest.mark.django_db
def test_seed_demo_is_complete_and_idempotent(catalog):
    from billing.selectors import balance_summary
    from provisioning.models import Instance
    from tenancy.models import User

    call_command("seed_demo")
    call_command("seed_demo")  # a second run adds nothing
    demo = User.objects.get(email="demo@cardmix.local")
    assert demo.email_verified_at is not None
    assert User.objects.get(email="admin@cardmix.local").is_staff
    org = demo.organizations.get()
    instances = Instance.objects.filter(organization=org)
    assert sorted(instances.values_list("name", flat=True)) == ["demo-h100x2", "demo-hybrid"]
    assert all(i.state == "provisioning" for i in instances)  # placed; the worker takes them on
    balance = balance_summary(org=org)
    assert balance["trial"] == 10_000_000 and balance["grant"] == 500_000_000
