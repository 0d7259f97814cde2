"""Base settings: every value comes from the environment, with embedded development defaults.

Each environment variable is declared once (core/settings_registry.py: name, type, default, choices, one line of
help) in the module of its domain, imported here in order; docs/operations/configuration.md is generated from the
declarations (`manage.py settings_doc`). A new variable: declare it with `setting(...)` in its domain's module and
regenerate the page.

The order is the page's: its tables follow the order the modules are first imported.
"""
# isort: skip_file
from .django import *  # noqa: F401,F403 - Django itself: the environment, apps, middleware, languages, email
from .database import *  # noqa: F401,F403 - PostgreSQL, the embedded server, the web's connection pool
from .cache_celery import *  # noqa: F401,F403 - the Celery broker and workers, Django's cache
from .api import *  # noqa: F401,F403 - DRF, the OpenAPI schema, throttles, Idempotency-Key, metrics
from .accounts import *  # noqa: F401,F403 - sign-in protection, sign-up, real-name verification, allauth, MFA, SSO
from .billing import *  # noqa: F401,F403 - trial, metering, the ledger, payments, top-ups
from .storage import *  # noqa: F401,F403 - volumes, storage roots, S3
from .catalog import *  # noqa: F401,F403 - the catalog's stock, placement demand, custom and saved images
from .provisioning import *  # noqa: F401,F403 - deadlines, the fleet driver, warm pools, containers' ports, clusters
from .gateway import *  # noqa: F401,F403 - the SSH gateway
from .proxy import *  # noqa: F401,F403 - the HTTP port proxy and the web terminal
from .hardware import *  # noqa: F401,F403 - node agents, Redfish, node cleaning, Slurm, unreachable nodes
from .webhooks import *  # noqa: F401,F403 - webhooks to customers
from .logging import *  # noqa: F401,F403 - JSON log lines
from .beat import *  # noqa: F401,F403 - Celery beat's schedule
