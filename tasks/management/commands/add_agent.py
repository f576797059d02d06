from django.core.management.base import BaseCommand, CommandError

from tasks.accounts import agent_add, org_get
from tasks.errors import ServiceError


class Command(BaseCommand):
    help = "Create an agent with a default profile."

    def add_arguments(self, parser):
        parser.add_argument("org")
        parser.add_argument("name")
        parser.add_argument("--no-auto-resume", action="store_true")

    def handle(self, *args, org, name, no_auto_resume, **options):
        try:
            agent_add(org=org_get(org), name=name, auto_resume=not no_auto_resume)
        except ServiceError as exc:
            raise CommandError(exc.detail) from exc
        self.stdout.write(f"agent {name} in {org}")
