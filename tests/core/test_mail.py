"""core/mail.py: recipients grouped by language, one message per language, sent after commit."""
from types import SimpleNamespace

import pytest
from django.core import mail
from django.utils import translation
from django.utils.translation import gettext

from core.mail import by_language, person, send_to_people


def test_recipients_are_grouped_by_their_language_and_blank_is_the_active_one():
    people = [SimpleNamespace(email="li@example.com", language="zh-hans"), ("ada@example.com", "en"),
              person("new@example.com"), ("LI@example.com", "en"), ("", "zh-hans"), ("x@example.com", "zh-CN"),
              ("y@example.com", "fr")]
    with translation.override("en"):
        assert by_language(people) == {"en": ["ada@example.com", "new@example.com", "y@example.com"],
                                       "zh-hans": ["li@example.com", "x@example.com"]}
    with translation.override("zh-hans"):  # a Chinese page: who has no setting reads Chinese
        assert by_language([person("new@example.com")]) == {"zh-hans": ["new@example.com"]}


@pytest.mark.django_db
def test_one_message_per_language_rendered_in_it_and_sent_on_commit(django_capture_on_commit_callbacks):
    with translation.override("en"), django_capture_on_commit_callbacks(execute=False) as callbacks:
        sent = send_to_people([("a@example.com", "en"), ("b@example.com", "zh-hans"), ("c@example.com", "")],
                              lambda: (gettext("Dashboard"), translation.get_language()))
    assert sent == 3 and mail.outbox == [] and len(callbacks) == 1  # nothing leaves before the commit
    callbacks[0]()
    assert sorted((m.to, m.subject, m.body) for m in mail.outbox) == [
        (["a@example.com", "c@example.com"], "Dashboard", "en"), (["b@example.com"], "概览", "zh-hans")]
    assert send_to_people([("", "en")], lambda: ("x", "y")) == 0
