"""Settings are chosen by CARDMIX_ENV: `development` (default) or `production`."""
import os

if os.environ.get("CARDMIX_ENV", "development") == "production":
    from .production import *  # noqa: F401,F403
else:
    from .base import *  # noqa: F401,F403
