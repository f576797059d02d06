import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from channels.sessions import SessionMiddlewareStack  # noqa: E402

from console.routing import websocket_urlpatterns  # noqa: E402

# The sockets get the session (its key, read from the cookie; nothing loaded) but not channels' AuthMiddleware:
# it reads the session and the user from the database before the consumer can accept, and daphne drops a
# handshake that waits longer than its limit. Each consumer accepts first and then reads who it is for, once
# (console.live.access.admit).
application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(SessionMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
