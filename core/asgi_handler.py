"""Django's ASGI handler with the middleware chain and the view run in one thread hop.

Every middleware of this project is sync-only, and so are its views but the port proxy. Django's ASGIHandler still builds an async chain
around them: it enters the sync middleware through sync_to_async, comes back to the event loop through async_to_sync
for its async core, then goes to a thread again for every process_view hook and for the view — each crossing a
future, a wake-up of the other thread and a copy of the context. Built as WSGI builds it (sync throughout) and
entered once, a request makes one crossing instead of four or five, in the same thread_sensitive thread as before
(the database connection stays the request's). Async views still work: the sync core wraps them in async_to_sync,
as under WSGI.
"""
from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler


class OneHopASGIHandler(ASGIHandler):
    # A response goes to the server in pieces of this size, each a write to the socket: a list page (about 120 kB)
    # in one, not two (Django's 64 kB). Slicing a whole bytes object copies nothing.
    chunk_size = 2**20

    def load_middleware(self, is_async=False):
        super().load_middleware(is_async=False)
        if is_async:
            self._middleware_chain = sync_to_async(self._middleware_chain, thread_sensitive=True)


def get_asgi_application() -> OneHopASGIHandler:
    """django.core.asgi.get_asgi_application with this handler."""
    import django

    django.setup(set_prefix=False)
    return OneHopASGIHandler()
