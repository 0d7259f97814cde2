"""Seed the demo: a staff admin, a verified demo user with an organization, and (when present) the fleet."""
from django.core.management import call_command, get_commands
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from tenancy.choices import Role
from tenancy.models import Membership, Organization, User

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
                demo = User.objects.create_user(DEMO_EMAIL, DEMO_PASSWORD, name="Demo User",
                                                email_verified_at=timezone.now())
                org = Organization.objects.create(name="Demo Lab", slug="demo-lab", is_personal=True)
                Membership.objects.create(organization=org, user=demo, role=Role.OWNER)
        if "seed_demo_fleet" in get_commands():
            call_command("seed_demo_fleet")
        self.stdout.write(self.style.SUCCESS(f"Demo login: {DEMO_EMAIL} / {DEMO_PASSWORD}"))
