"""`python -m tests.accounts.idp.server PORT`: migrate the IdP's own database, create the person and the
client application named by the environment (IDP_USERS as JSON, IDP_CLIENT_ID, IDP_CLIENT_SECRET,
IDP_REDIRECT_URIS), then serve on 127.0.0.1:PORT (threaded: Cardmix calls its token endpoint while a browser
waits)."""
import json
import os
import sys
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

os.environ["DJANGO_SETTINGS_MODULE"] = "tests.accounts.idp.settings"


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):
        sys.stderr.write("idp: " + (format % args) + "\n")


def main(port: int) -> None:
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.core.wsgi import get_wsgi_application
    from oauth2_provider.models import Application

    call_command("migrate", verbosity=0)
    for person in json.loads(os.environ.get("IDP_USERS", "[]")):
        User.objects.create_user(username=person["username"], password=person["password"],
                                 email=person["email"], first_name=person.get("name", ""))
    Application.objects.create(
        name="cardmix", client_id=os.environ["IDP_CLIENT_ID"], client_secret=os.environ["IDP_CLIENT_SECRET"],
        client_type=Application.CLIENT_CONFIDENTIAL, authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=os.environ["IDP_REDIRECT_URIS"], algorithm=Application.RS256_ALGORITHM,
        skip_authorization=True)
    server = make_server("127.0.0.1", port, get_wsgi_application(), server_class=_Server,
                         handler_class=_QuietHandler)
    print("idp ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(int(sys.argv[1]))
