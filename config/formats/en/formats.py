"""Date formats for English (FORMAT_MODULE_PATH): a datetime shown without an explicit format — the admin's lists and
read-only fields — carries its UTC offset, so no time reads as zone-less (the console names its zone the same way)."""
DATETIME_FORMAT = r"Y-m-d H:i:s \U\T\CO"
SHORT_DATETIME_FORMAT = r"Y-m-d H:i \U\T\CO"
