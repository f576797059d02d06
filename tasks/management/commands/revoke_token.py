import sys

from django.core.management.base import BaseCommand, CommandError

from tasks.accounts import org_get, token_revoke
from tasks.errors import ServiceError


class Command(BaseCommand):
    help = (
        "Revoke API tokens at once: one by its key (--key KEY, or --key - to read it from stdin), every token of "
        "a person (USERNAME), or every token of a worker identity (--worker NAME --org SLUG). Prints how many."
    )

    def add_arguments(self, parser):
        parser.add_argument("username", nargs="?")
        parser.add_argument("--key", default=None)
        parser.add_argument("--worker", default=None)
        parser.add_argument("--org", default=None)

    def handle(self, *args, username, key, worker, org, **options):
        if sum(bool(x) for x in (username, key, worker)) != 1:
            raise CommandError("Name exactly one of: a username, --key KEY, or --worker NAME --org SLUG.")
        if key == "-":
            key = sys.stdin.readline().strip()
        try:
            if worker:
                if not org:
                    raise CommandError("--worker needs --org.")
                count = token_revoke(worker=worker, org=org_get(org))
            else:
                count = token_revoke(key=key, username=username)
        except ServiceError as exc:
            raise CommandError(exc.detail) from exc
        if key and not count:
            raise CommandError("No token has that key (it may have been revoked already).")
        self.stdout.write(f"revoked {count} token{'s' if count != 1 else ''}")
