"""i18n tests use the e2e fixtures (live-server settings, headless Chromium)."""
from tests.e2e.conftest import browser, e2e_env  # noqa: F401  (fixtures)
