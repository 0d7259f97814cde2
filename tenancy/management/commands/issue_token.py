"""Print a new API token for a user (optionally creating a verified user, as signup + verification does)."""
from django.core.management.base import BaseCommand, CommandError

from core.errors import ServiceError
from tenancy import services
from tenancy.models import Membership, TokenScope, User, normalize_email


class Command(BaseCommand):
    help = "Issue an API token: --email E [--org SLUG] [--scope read|write] [--create-user] [--name N]"

    def add_arguments(self, parser):
        parser.add_argument("--email", required=True)
        parser.add_argument("--org", help="organization slug (default: the user's oldest organization)")
        parser.add_argument("--scope", choices=TokenScope.values, default=TokenScope.WRITE)
        parser.add_argument("--name", default="issue_token")
        parser.add_argument("--create-user", action="store_true",
                            help="create a verified user with a personal organization (trial included) if missing")

    def handle(self, *args, email, org, scope, name, create_user, **options):
        email = normalize_email(email)
        user = User.objects.filter(email=email).first()
        try:
            if user is None:
                if not create_user:
                    raise CommandError(f"No user {email}; pass --create-user to create one.")
                user = services.user_create_verified(email=email)
            memberships = Membership.objects.select_related("organization", "user").filter(user=user)
            membership = (memberships.filter(organization__slug=org) if org else memberships.order_by("created_at")).first()
            if membership is None:
                raise CommandError(f"{email} is not a member of {org!r}." if org else f"{email} has no organization.")
            token, secret = services.token_create(membership=membership, name=name, scope=scope)
        except ServiceError as exc:
            raise CommandError(f"{exc.message} {exc.details or ''}".strip()) from exc
        self.stderr.write(f"token {token.prefix}… for {email} in {membership.organization.slug} (scope {scope})")
        self.stdout.write(secret)
