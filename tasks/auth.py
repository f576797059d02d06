"""Token authentication for people and workers (`Authorization: Token <key>`)."""

from rest_framework import authentication, exceptions, permissions

from tasks.models import ApiToken, Worker


class TokenAuthentication(authentication.BaseAuthentication):
    keyword = "Token"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Malformed token header.")
        key = header[1].decode(errors="replace")
        token = ApiToken.objects.select_related("user", "worker__org").filter(digest=ApiToken.hash(key)).first()
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        if token.worker_id:
            return (token.worker, token)
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("User inactive.")
        return (token.user, token)

    def authenticate_header(self, request):
        return self.keyword


class IsWorker(permissions.BasePermission):
    message = "This endpoint is for worker tokens."

    def has_permission(self, request, view):
        return isinstance(request.user, Worker)


class IsPerson(permissions.BasePermission):
    message = "This endpoint is for people, not workers."

    def has_permission(self, request, view):
        user = request.user
        return bool(user and user.is_authenticated and not isinstance(user, Worker))


try:
    from drf_spectacular.extensions import OpenApiAuthenticationExtension

    class TokenScheme(OpenApiAuthenticationExtension):
        target_class = "tasks.auth.TokenAuthentication"
        name = "tokenAuth"

        def get_security_definition(self, auto_schema):
            return {
                "type": "apiKey",
                "in": "header",
                "name": "Authorization",
                "description": "`Token <key>` from `manage.py issue_token`.",
            }
except ImportError:  # pragma: no cover - the schema is optional at run time
    pass
