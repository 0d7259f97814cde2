"""Seed the demo: a staff admin, a verified demo user with an organization, and (when present) the fleet."""
from django.core.management import call_command, get_commands
from django.core.management.base import BaseCommand
from django.db import transaction

from tenancy.choices import Role
from tenancy.models import Membership, Organization, User
from tenancy.services import user_create_verified

DEMO_EMAIL, DEMO_PASSWORD = "demo@cardmix.local", "cardmix-demo-2026"
ADMIN_EMAIL, ADMIN_PASSWORD = "admin@cardmix.local", "cardmix-admin-2026"


class Command(BaseCommand):
    help = "Create the demo login and demo fleet (idempotent)."

    def handle(self, *args, **options):
        with transaction.atomic():
            if not User.objects.filter(email=ADMIN_EMAIL).exists():
                User.objects.create_superuser(ADMIN_EMAIL, ADMIN_PASSWORD, name="Cardmix Operator")
            demo = User.objects.filter(email=DEMO_EMAIL).first()
            if demo is None:
                # Through the tenancy services, exactly like signup + verification (trial hook included).
                demo = user_create_verified(email=DEMO_EMAIL, password=DEMO_PASSWORD, name="Demo User")
                org = Membership.objects.get(user=demo, role=Role.OWNER).organization
                if not Organization.objects.filter(slug="demo-lab").exists():
                    org.name, org.slug = "Demo Lab", "demo-lab"
                    org.save(update_fields=["name", "slug"])
        if "seed_demo_fleet" in get_commands():
            call_command("seed_demo_fleet")
        self.stdout.write(self.style.SUCCESS(f"Demo login: {DEMO_EMAIL} / {DEMO_PASSWORD}"))
