"""WebSocket consumers (Django Channels, routed in console/routing.py): the port proxy's pass-through and
the web terminal."""
