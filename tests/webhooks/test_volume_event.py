"""volume.deletion_scheduled: both retention warnings reach a subscribed endpoint, each once."""
from datetime import timedelta

import pytest

from core.dbclock import db_now
from tests.storage.test_retention import broke_org_with_volume, sweep  # noqa: F401 (sweep: a fixture)
from webhooks.models import WebhookEvent
from webhooks.services import endpoint_create

pytestmark = pytest.mark.django_db


def test_each_retention_warning_is_one_event(member_factory, settings, sweep):  # noqa: F811
    settings.VOLUME_RETENTION_DAYS = 30
    owner, volume = broke_org_with_volume(member_factory)
    endpoint_create(org=owner.organization, url="https://93.184.216.34/h", event_types=["volume.deletion_scheduled"])
    t = db_now()
    sweep(t)
    sweep(t + timedelta(days=23))
    sweep(t + timedelta(days=25))  # nothing new
    sweep(t + timedelta(days=29))
    events = list(WebhookEvent.objects.filter(type="volume.deletion_scheduled").order_by("created_at"))
    assert [e.payload["data"]["lead_days"] for e in events] == [7, 1]
    assert {e.payload["data"]["volume"]["id"] for e in events} == {str(volume.pk)}
    assert events[0].payload["data"]["deletion_at"] == (t + timedelta(days=30)).isoformat()
