from django.core.management.base import BaseCommand, CommandError

from tasks.accounts import org_get, token_issue
from tasks.errors import ServiceError


class Command(BaseCommand):
    help = "Print one API token on stdout, nothing else."

    def add_arguments(self, parser):
        parser.add_argument("username", nargs="?")
        parser.add_argument("--worker", default=None)
        parser.add_argument("--org", default=None)

    def handle(self, *args, username, worker, org, **options):
        try:
            if worker:
                if not org:
                    raise CommandError("--worker needs --org.")
                key = token_issue(worker=worker, org=org_get(org))
            else:
                if not username:
                    raise CommandError("Name a username, or use --worker NAME --org SLUG.")
                key = token_issue(username=username)
        except ServiceError as exc:
            raise CommandError(exc.detail) from exc
        self.stdout.write(key)
