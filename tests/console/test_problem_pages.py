"""A page that does not exist (404) and a request that cannot be read (400): the console's own styled page, with
the navigation and ways on, saying what happened — never "Not allowed … ask an admin" for a malformed request."""

import re

import pytest
from django.test import Client

from tests.helpers import visible_text

pytestmark = pytest.mark.django_db


def heading(html: str) -> str:
    return visible_text(re.search(r"<h1[^>]*>.*?</h1>", html, re.S).group(0))


def test_an_unknown_address_is_the_styled_404_with_navigation(login, operator):
    response = login(operator).get("/no/such/page/")
    html = response.content.decode()
    assert response.status_code == 404
    assert 'href="/static/console/console.css"' in html or "console.css" in html
    assert '<header class="top">' in html and '<nav class="nav">' in html
    assert heading(html) == "Page not found"
    text = visible_text(html)
    assert "There is no page at this address." in text and "Go to the board" in text and "Open the inbox" in text
    assert "olive" in text  # who is signed in, as on every page


def test_a_missing_task_keeps_its_own_sentence(login, operator):
    response = login(operator).get("/tasks/999999/")
    assert response.status_code == 404
    assert heading(response.content.decode()) == "Page not found"
    assert "There is no task #999999 that you can see." in visible_text(response.content.decode())


def test_signed_out_a_404_offers_sign_in(db):
    response = Client().get("/no/such/page/")
    assert response.status_code == 404
    assert "Sign in" in visible_text(response.content.decode())


def test_an_api_404_keeps_the_api_error_shape(api):
    response = api.get("/api/no-such-thing/")
    assert response.status_code == 404 and response.json()["code"] == "not_found"


def test_a_malformed_request_is_a_400_that_says_so_not_a_refusal(login, operator, settings):
    settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 5
    response = login(operator).post("/views/", {f"f{i}": "x" for i in range(10)})
    html = response.content.decode()
    assert response.status_code == 400
    assert heading(html) == "This request could not be read"
    assert "Not allowed" not in html and "Who can help" not in html
    assert '<nav class="nav">' in html and "Go to the board" in visible_text(html)


def test_a_nul_in_the_address_is_the_400_page_with_its_reason(login, operator):
    response = login(operator).get("/?q=a%00b")
    html = response.content.decode()
    assert response.status_code == 400 and heading(html) == "This request could not be read"
    assert "NUL character" in visible_text(html) and "Not allowed" not in html


def test_a_bad_board_cursor_is_the_400_page(login, operator):
    response = login(operator).get("/?cursor=yesterday")
    assert response.status_code == 400
    assert heading(response.content.decode()) == "This request could not be read"
    assert "That page cursor is not valid." in visible_text(response.content.decode())


def test_a_cards_control_gets_the_words_not_a_whole_page(login, operator):
    response = login(operator).post("/runs/999999/stop/", HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert response.status_code == 404
    assert "<html" not in html and '<header class="top">' not in html
    assert "There is no run #999999 that you can see." in visible_text(html)


def test_a_host_this_console_does_not_serve_is_the_400_page(db):
    response = Client().get("/", HTTP_HOST="evil.example")
    assert response.status_code == 400
    assert heading(response.content.decode()) == "This request could not be read"
