"""select_for_update helpers for tenancy rows. Lock order everywhere: organization, then instance."""
from .models import Organization


def organization_lock(org_id) -> Organization:
    """Lock one organization row: serialises quota checks, creates and starts, and member changes in it.

    FOR NO KEY UPDATE, not FOR UPDATE: inserting a row that references the organization (an audit event, an
    instance, a meter) takes a KEY SHARE lock on it, which FOR UPDATE blocks. So a transaction that holds an
    instance and records an audit event never waits here, and a start waiting for that instance cannot
    deadlock with it.
    """
    return Organization.objects.select_for_update(no_key=True).get(pk=org_id)
