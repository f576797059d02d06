"""The API's JSON parser and renderer: the one server-side boundary of the payload encoding (tasks.payloads).

Every JSON body is parsed strictly and turned into its canonical wire form
before any view sees it, so everything the console stores or compares is plain
text: a string with NUL or a lone surrogate becomes `{"$text": …}`, which a
JSONField keeps as is (PostgreSQL included) and a text field refuses with 400
`invalid` ("Not a valid string"), since a title, a note or a name is text.
Nesting deeper than `payloads.MAX_DEPTH`, lists longer than `payloads.MAX_ITEMS`,
numbers that are not finite and malformed tags are 400 `invalid` too.
"""

import codecs
import json

from django.conf import settings
from rest_framework import parsers, renderers
from rest_framework.exceptions import ParseError

from tasks import payloads


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        parser_context = parser_context or {}
        encoding = parser_context.get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = codecs.getreader(encoding)(stream).read()
        except (UnicodeDecodeError, LookupError) as exc:
            raise ParseError(f"The request body is not {encoding} text: {exc}") from None
        try:
            return payloads.loads(text)
        except payloads.PayloadError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None


class JSONRenderer(renderers.JSONRenderer):
    """DRF's renderer; a value that UTF-8 cannot carry (a lone surrogate in a file name) is sent as an ASCII escape."""

    def render(self, data, accepted_media_type=None, renderer_context=None):
        try:
            return super().render(data, accepted_media_type, renderer_context)
        except UnicodeEncodeError:
            return json.dumps(data, cls=self.encoder_class, ensure_ascii=True, allow_nan=False).encode()
