"""Date formats for Simplified Chinese (FORMAT_MODULE_PATH): as English's, a datetime shown without an explicit format
carries its UTC offset (the admin's lists and read-only fields); the rest comes from Django's zh_Hans formats."""
from django.conf.locale.zh_Hans.formats import *  # noqa: F403  (Django's own, then the offset)

DATETIME_FORMAT = r"Y年n月j日 H:i:s \U\T\CO"
SHORT_DATETIME_FORMAT = r"Y-m-d H:i \U\T\CO"
