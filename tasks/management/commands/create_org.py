from django.core.management.base import BaseCommand

from tasks.accounts import org_create


class Command(BaseCommand):
    help = "Create an organization (no-op if it exists)."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--name", default="")

    def handle(self, *args, slug, name, **options):
        org, created = org_create(slug=slug, name=name)
        self.stdout.write(f"{'created' if created else 'exists'}: {org.slug}")
