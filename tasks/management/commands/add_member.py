from django.core.management.base import BaseCommand, CommandError

from tasks.accounts import member_add, org_get
from tasks.errors import ServiceError


class Command(BaseCommand):
    help = "Create the user if missing and set their role in the organization."

    def add_arguments(self, parser):
        parser.add_argument("org")
        parser.add_argument("username")
        parser.add_argument("--role", required=True, choices=["viewer", "operator", "admin"])
        parser.add_argument("--password", default=None)

    def handle(self, *args, org, username, role, password, **options):
        try:
            member_add(org=org_get(org), username=username, role=role, password=password)
        except ServiceError as exc:
            raise CommandError(exc.detail) from exc
        self.stdout.write(f"{username} is {role} in {org}")
