"""Requests whose URL, headers, cookies or form fields hold NUL or lone surrogates are refused with 400.

Why a middleware, and why only there: a URL, a header, a cookie and a form a
person types are text, and no page or API means anything by a NUL in them —
yet any of them can reach a database lookup (a session cookie, a search, an
agent name in a path) where PostgreSQL refuses it with an error that would be
a 500. One check in front of every view (admin and sign-in included, and any
route added later) is the right depth. JSON bodies are not checked here: in
them NUL and lone surrogates are data, kept faithfully by the payload encoding
(tasks/payloads.py, tasks/parsers.py), and text fields of a JSON body refuse
them through their serializers.
"""

import sys

from django.contrib.auth.models import AnonymousUser
from django.http import HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.views.defaults import server_error as django_server_error

from console.views.refusals import bad_request
from tasks import payloads
from tasks.errors import BUSY_RETRY_AFTER, database_trouble

FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
DETAIL = "The request holds a NUL character or a lone surrogate in its {where}; nothing was done."


def _plain(values) -> bool:
    return all(payloads.is_plain(v) for v in values if isinstance(v, str))


def problem(request) -> str | None:
    """Where the request holds what text cannot hold, or None."""
    if not payloads.is_plain(request.path_info):
        return "address"
    if not _plain(request.META.get(k) for k in request.META if k.startswith("HTTP_")):
        return "headers"
    if not _plain(request.COOKIES) or not _plain(request.COOKIES.values()):
        return "cookies"
    if not _plain(request.GET) or not _plain(v for values in request.GET.lists() for v in values[1]):
        return "query string"
    if request.method == "POST" and request.content_type in FORM_TYPES:
        if not _plain(request.POST) or not _plain(v for values in request.POST.lists() for v in values[1]):
            return "form fields"
    return None


class PlainTextInputMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        where = problem(request)
        if where is None:
            return self.get_response(request)
        detail = DETAIL.format(where=where)
        if request.path_info.startswith("/api/"):
            return JsonResponse({"code": "invalid", "detail": detail, "field": where}, status=400)

        if where == "cookies":
            request.user = AnonymousUser()  # the session cookie itself is what cannot be looked up
        return bad_request(request, reason=detail)


def database_trouble_response(request, trouble):
    """The 503 for a request the database could not serve, drawn without the database, with Retry-After: the
    API's error shape with the cause's code, the sentence alone for a card's control, or the busy page."""

    if request.path_info.startswith("/api/"):
        response = JsonResponse({"code": trouble.code, "detail": trouble.detail}, status=503)
    elif request.headers.get("HX-Request") == "true":
        # A card's control: htmx swaps no error into the card, and live.js shows this sentence in the header.
        response = HttpResponse(trouble.detail, content_type="text/plain; charset=utf-8", status=503)
    else:
        # Try again repeats a page load; a form sent by POST is not repeated by a link, so that one leads back.
        again = request.get_full_path() if request.method == "GET" else None
        context = {"title": trouble.title, "detail": trouble.detail, "again": again, "code": trouble.code}
        response = HttpResponse(render_to_string("busy.html", context), status=503)
    response["Retry-After"] = str(BUSY_RETRY_AFTER)
    return response


class DatabaseBusyMiddleware:
    """A request the database could not serve is answered 503 with its cause (tasks.errors.database_trouble),
    rendered without the database, instead of a 500: `database_busy` when it waited out the connection pool
    (every connection of this process in use for CONSOLE_DB_POOL_TIMEOUT seconds) or SQLite's write lock,
    `database_unavailable` when the database cannot be reached or dropped the connection mid-request.

    Views' errors arrive here; one raised in a middleware reaches `server_error` (handler500), which answers the
    same way."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):

        trouble = database_trouble(exception)
        return None if trouble is None else database_trouble_response(request, trouble)


def server_error(request):
    """`handler500`: a database that could not serve the request is the 503 of its cause, wherever it was met
    (a middleware's session or user lookup included); anything else is Django's own 500."""

    trouble = database_trouble(sys.exc_info()[1])
    if trouble is not None:
        return database_trouble_response(request, trouble)
    return django_server_error(request)
