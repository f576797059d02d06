from pathlib import Path

from django.core.management.base import BaseCommand

from recovery.demo import seed


class Command(BaseCommand):
    help = "Seed the demo organization through the real engine (a real server, real workers, real crashes)."

    def add_arguments(self, parser):
        parser.add_argument("--credentials", default=None, help="Also write the sign-in lines to this file.")

    def handle(self, *args, credentials, **options):
        passwords = seed(stdout=self.stdout, credentials=Path(credentials) if credentials else None)
        self.stdout.write("demo organization 'demo' is ready; sign in as:")
        for name, (role, password) in passwords.items():
            self.stdout.write(f"  {name:9} {password}   ({role})")
