"""Seed the demo: a staff admin, a verified demo user with an organization (real-name verified), the fleet, and two demo
instances (an H100 container and an Ascend 910B + H800 hybrid) that the worker takes to `running`
within seconds of `make run` starting; storage prices, the dataset/model library, and the H100 instance's
checkpoint disk and shared volume."""
from django.core.management import call_command, get_commands
from django.core.management.base import BaseCommand
from django.db import transaction

from billing.services import grant_credit
from inventory.models import Node, Zone
from provisioning.models import Instance
from provisioning.services.instances import instance_create
from provisioning.services.specs import spec_from_data
from storage.catalog_seed import storage_catalog_seed
from storage.services import volume_create
from tenancy.choices import Role
from tenancy.models import Membership, Organization, User
from tenancy.realname.services import realname_approve, realname_submit
from tenancy.services import user_create_verified

# The demo lab's real-name verification: a made-up company with a valid GB 32100 check character, approved by
# the operator, so the demo may use every card type and bare metal.
DEMO_CREDIT_CODE = "91110108MA01CMX006"
DEMO_LICENCE = b"%PDF-1.4\n% Cardmix demo business licence\n%%EOF\n"
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
                admin = User.objects.get(email=ADMIN_EMAIL)
                submitted = realname_submit(org=org, actor=demo, kind="enterprise", legal_name="Demo Lab Co., Ltd.",
                                            credit_code=DEMO_CREDIT_CODE, licence=DEMO_LICENCE)
                realname_approve(verification_id=submitted.pk, actor=admin)
        if "seed_demo_fleet" in get_commands():
            call_command("seed_demo_fleet")
        storage_catalog_seed()  # storage prices per zone and the dataset/model library
        self._demo_instances(demo)
        self.stdout.write(self.style.SUCCESS(f"Demo login: {DEMO_EMAIL} / {DEMO_PASSWORD}"))

    def _demo_instances(self, demo):
        """Create the demo instances once (through the same service as the API)."""
        org = Membership.objects.get(user=demo, role=Role.OWNER).organization
        if Instance.objects.filter(organization=org).exists():
            return
        # A demo sponsorship grant, so the demo runs for hours instead of the trial's half hour.
        grant_credit(org=org, amount=500_000_000, key=f"demo_grant:{org.pk}", grant_ref="demo")
        demos = [
            ("demo-h100x2", {"kind": "container", "items": [{"accelerator": "h100-sxm-80g", "count": 2}],
                             "image": "pytorch-2.3-cuda12.3"}),
            ("demo-hybrid", {"kind": "container", "items": [{"accelerator": "ascend-910b", "count": 2},
                                                            {"accelerator": "h800-sxm-80g", "count": 2}],
                             "images": {"huawei": "cann-torch-npu", "nvidia": "pytorch-2.3-cuda12.3"}}),
        ]
        h100_zone = Node.objects.filter(accelerator__slug="h100-sxm-80g").values_list("zone", flat=True).first()
        storage = {}
        if h100_zone is not None:
            # A checkpoint disk and the team's shared volume on the H100 instance, with ImageNet mounted read-only.
            zone = Zone.objects.get(pk=h100_zone)
            disk = volume_create(org=org, zone=zone, name="demo-ckpt", kind="disk", size_gib=500, actor=demo)
            shared = volume_create(org=org, zone=zone, name="team-data", kind="shared", size_gib=2048, actor=demo)
            storage["demo-h100x2"] = {"volumes": [{"volume": disk.pk}, {"volume": shared.pk}],
                                      "datasets": ["imagenet-1k"]}
        for name, data in demos:
            instance_create(org=org, actor=demo, spec=spec_from_data(data), name=name, **storage.get(name, {}))
            self.stdout.write(f"Demo instance {name} created; the worker will take it to running.")
