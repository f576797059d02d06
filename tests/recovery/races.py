"""Shared by test modules (from test_concurrency.py): no test module imports another."""

import threading
from concurrent.futures import ThreadPoolExecutor

from django.db import connections


def race(requests):
    """Send every request at the same moment, each from its own thread and client; return the responses."""
    start = threading.Barrier(len(requests))

    def send(request):
        start.wait()
        try:
            return request()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(len(requests)) as pool:
        return list(pool.map(send, requests))
