"""Browser access: the HTTP port proxy (provisioning/http_ports.py, console/views/proxy.py) and the web terminal
(console/consumers/terminal.py)."""
from django.core.exceptions import ImproperlyConfigured

from core.settings_registry import section, setting

section("Port proxy and web terminal", "A container's HTTP ports reached through the console (by path, or a host "
        "per port: see [a host per port](browser-access.md#same-origin-or-a-host-per-port)), share links, and the "
        "web terminal.")

# --- HTTP ports -----------------------------------------------------------------------------------------------------
# A container's HTTP ports (its image's and the user's): the i-th is published on its node at
# CONTAINER_HTTP_PORT_BASE + first card × HTTP_PORTS_PER_INSTANCE + i (open BASE..BASE+64×N on the nodes' firewall to
# the platform only). An instance declares at most HTTP_PORTS_PER_INSTANCE ports.
HTTP_PORTS_PER_INSTANCE = setting("HTTP_PORTS_PER_INSTANCE", "int", 8,
                                  "the most HTTP ports an instance declares (1..32)")
CONTAINER_HTTP_PORT_BASE = setting("CONTAINER_HTTP_PORT_BASE", "int", 31000,
                                   "a container's i-th declared HTTP port is published on its node at base + first "
                                   "card × `HTTP_PORTS_PER_INSTANCE` + i (open base..base+64×8 to the platform only)")
if not 1 <= HTTP_PORTS_PER_INSTANCE <= 32 or not 1024 <= CONTAINER_HTTP_PORT_BASE <= 65535 - 64 * HTTP_PORTS_PER_INSTANCE:
    raise ImproperlyConfigured("HTTP_PORTS_PER_INSTANCE must be 1..32 and CONTAINER_HTTP_PORT_BASE leave room for "
                               "64 cards × HTTP_PORTS_PER_INSTANCE ports below 65536.")
# The proxy's longest wait for an instance's HTTP port to answer (seconds); a share link's longest life (days).
PROXY_UPSTREAM_TIMEOUT_SECONDS = setting("PROXY_UPSTREAM_TIMEOUT_SECONDS", "float", 60.0,
                                         "the port proxy's longest wait for an instance's port to answer")
PORT_SHARE_MAX_DAYS = setting("PORT_SHARE_MAX_DAYS", "int", 30, "the longest a port's share link may live")

# --- Where ports are served -----------------------------------------------------------------------------------------
# "path" is /proxy/<instance>/<port>/ on the platform's own origin; "subdomain" is
# <scheme>://<port>-<instance id hex>.PROXY_BASE_DOMAIN/ (a wildcard DNS name and certificate), each port its own
# origin, so an app there cannot read the console. PROXY_BASE_DOMAIN may carry a :port; the scheme is SITE_URL's. A
# console hand-off signs a browser in on one port for PROXY_GRANT_SECONDS.
PROXY_MODE = setting("PROXY_MODE", "str", "path",
                     "where the port proxy serves ports: `path` (`/proxy/<instance>/<port>/` on the console's origin) "
                     "or `subdomain` (`<port>-<instance id hex>.<PROXY_BASE_DOMAIN>`, each port its own origin; needs "
                     "wildcard DNS and TLS)", choices=("path", "subdomain"))
PROXY_BASE_DOMAIN = setting("PROXY_BASE_DOMAIN", "str", "",
                            "subdomain mode's base domain (it may carry a `:port`; the scheme is `SITE_URL`'s)"
                            ).strip().strip(".").lower()
PROXY_GRANT_SECONDS = setting("PROXY_GRANT_SECONDS", "int", 12 * 3600,
                              "how long a console hand-off keeps a browser signed in on a port's host")
if PROXY_MODE == "subdomain" and not PROXY_BASE_DOMAIN:
    raise ImproperlyConfigured('PROXY_MODE must be "path" or "subdomain", and "subdomain" needs PROXY_BASE_DOMAIN.')

# --- The web terminal -----------------------------------------------------------------------------------------------
# How long its SSH connection may take, and how often an open terminal checks that its instance still runs (it closes
# within that long after a stop).
TERMINAL_CONNECT_TIMEOUT_SECONDS = setting("TERMINAL_CONNECT_TIMEOUT_SECONDS", "float", 15.0,
                                           "the web terminal's SSH connect limit")
TERMINAL_STATE_CHECK_SECONDS = setting("TERMINAL_STATE_CHECK_SECONDS", "float", 5.0,
                                       "how often an open terminal checks its instance still runs (it closes that "
                                       "long after a stop)")
# A terminal's shell outlives a dropped WebSocket this long (a reconnect reattaches to it), keeping at most this
# much of what it printed meanwhile for the reconnect (console/terminal_sessions.py).
TERMINAL_GRACE_SECONDS = setting("TERMINAL_GRACE_SECONDS", "float", 120.0,
                                 "how long a terminal's shell waits for its page to reconnect after a dropped "
                                 "connection")
TERMINAL_BACKLOG_BYTES = setting("TERMINAL_BACKLOG_BYTES", "int", 256 * 1024,
                                 "how much of its output the shell keeps meanwhile for the reconnect")
