"""The notifications API (API.md, Power tools): destinations and the delivery log, for admins.

A destination's signing secret is in the 201 that created it and nowhere else; that answer is not kept as an
idempotent replay either (a replay would show the secret again), so a repeated POST adds another destination.
"""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response

from recovery import notify
from recovery.models import NOTICE_TYPES, DestinationKind
from tasks.api import BaseAPIView, int_param, paginate
from tasks.auth import IsPerson
from tasks.authz import require_role
from tasks.errors import Invalid, NotFound
from tasks.models import Role
from tasks.selectors import memberships_of


def _org(request) -> int:
    """The organization asked for (`org`, a slug) or the person's first; NotFound for one they are not in."""
    data = request.data if isinstance(request.data, dict) else {}
    slug = request.query_params.get("org") or data.get("org")
    ms = memberships_of(request.user)
    m = next((m for m in ms if m.org.slug == slug), None) if slug else (ms[0] if ms else None)
    if m is None:
        raise NotFound("No such organization.")
    require_role(request.user, m.org_id, Role.ADMIN)
    return m.org_id


class DestinationOut(serializers.Serializer):
    id = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=DestinationKind.values)
    url = serializers.CharField(help_text="redacted: a webhook's scheme and host, an Apprise URL's service")
    events = serializers.ListField(child=serializers.ChoiceField(choices=list(NOTICE_TYPES)))
    enabled = serializers.BooleanField()
    failing = serializers.BooleanField()
    failures = serializers.IntegerField()
    last_error = serializers.CharField(allow_blank=True)
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()


class DestinationCreatedOut(DestinationOut):
    secret = serializers.CharField(help_text="the signing secret (whsec_…): in this answer only, never again")


class DestinationPageOut(serializers.Serializer):
    results = DestinationOut(many=True)
    next = serializers.CharField(allow_null=True)


class DestinationIn(serializers.Serializer):
    kind = serializers.ChoiceField(choices=DestinationKind.values)
    url = serializers.CharField(max_length=2000)
    events = serializers.ListField(child=serializers.ChoiceField(choices=list(NOTICE_TYPES)))
    org = serializers.SlugField(required=False)


class DeliveryTryOut(serializers.Serializer):
    at = serializers.DateTimeField()
    status = serializers.IntegerField(allow_null=True)
    error = serializers.CharField(allow_blank=True)


class DeliveryOut(serializers.Serializer):
    id = serializers.IntegerField()
    destination = serializers.IntegerField()
    event = serializers.ChoiceField(choices=list(NOTICE_TYPES))
    event_id = serializers.IntegerField()
    task = serializers.IntegerField(allow_null=True)
    attempts = serializers.IntegerField()
    status = serializers.ChoiceField(choices=["pending", "delivered", "failed", "given_up"])
    last_error = serializers.CharField(allow_blank=True)
    tries = DeliveryTryOut(many=True)
    created_at = serializers.DateTimeField()
    delivered_at = serializers.DateTimeField(allow_null=True)


class DeliveryPageOut(serializers.Serializer):
    results = DeliveryOut(many=True)
    next = serializers.CharField(allow_null=True)


class DestinationListView(BaseAPIView):
    """`GET` the organization's notification destinations (never their secrets); `POST` adds one (admin)."""

    permission_classes = [IsPerson]

    @extend_schema(parameters=[OpenApiParameter("org", str)], responses=DestinationPageOut)
    def get(self, request):
        org_id = _org(request)
        return Response({"results": [notify.destination_data(d) for d in notify.destinations(org_id)], "next": None})

    @extend_schema(request=DestinationIn, responses={201: DestinationCreatedOut})
    def post(self, request):
        org_id = _org(request)
        if not isinstance(request.data, dict):
            raise Invalid("The body is a JSON object with kind, url and events.")
        dest, secret = notify.destination_add(
            actor=request.user,
            org_id=org_id,
            kind=request.data.get("kind"),
            url=request.data.get("url"),
            events=request.data.get("events"),
        )
        return Response({**notify.destination_data(dest), "secret": secret}, status=status.HTTP_201_CREATED)


class DeliveryListView(BaseAPIView):
    """`GET` the organization's newest notification deliveries, each with its tries (admin)."""

    permission_classes = [IsPerson]

    @extend_schema(
        parameters=[OpenApiParameter("org", str), OpenApiParameter("before", int)], responses=DeliveryPageOut
    )
    def get(self, request):
        """Newest first, a page of `notify.DELIVERY_LOG`; `next` carries `before` (the last delivery's id)."""
        org_id = _org(request)
        page = notify.deliveries(org_id, limit=notify.DELIVERY_LOG + 1, before=int_param(request, "before"))
        more = len(page) > notify.DELIVERY_LOG
        page = page[: notify.DELIVERY_LOG]
        items = [notify.delivery_data(d) for d in page]
        return Response(paginate(request, items, cursor_param="before", cursor_value=page[-1].pk if more else None))
