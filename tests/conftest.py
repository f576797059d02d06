import pytest
from rest_framework.test import APIClient

from tests.factories import make_agent, make_member, make_org, user_token, worker_token


def pytest_collection_modifyitems(config, items):
    # Playwright's sync API keeps an event loop in the main thread once it has
    # started: browser tests go last so nothing async runs after them.
    items.sort(key=lambda item: 1 if item.get_closest_marker("browser") else 0)


@pytest.fixture(autouse=True)
def fresh_workspaces(settings):
    """Every test starts with an empty workspaces root: task ids repeat across rolled-back tests and
    `--create-db` runs, and a task must never find another test's files in its directory."""
    import shutil
    from pathlib import Path

    root = Path(settings.CONSOLE_WORKSPACES)
    if root.exists():
        shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    yield


@pytest.fixture(autouse=True)
def fresh_instance_polls():
    """Worker instances' polls are recorded at most once a second, remembered per process: ids repeat across
    rolled-back tests, so every test starts with none remembered."""
    from tasks.worker_instances import forget_polls

    forget_polls()
    yield


@pytest.fixture(autouse=True)
def fresh_rate_limits(request, django_db_blocker):
    """Rate-limit counts live in the database cache, which a transactional test's flush does not empty
    (and user ids repeat after it on SQLite): a test that used the database leaves the cache empty."""
    yield
    if {"db", "transactional_db"} & set(request.fixturenames) or request.node.get_closest_marker("django_db"):
        from django.core.cache import cache

        with django_db_blocker.unblock():
            cache.clear()


@pytest.fixture
def org(db):
    return make_org("acme")


@pytest.fixture
def other_org(db):
    return make_org("globex")


@pytest.fixture
def export_root(org, settings, tmp_path):
    """The test's own directory as the server's export area and as an export root of acme, so its tasks may
    export anywhere under it (by default an organization has no export root and exports nowhere)."""
    from tasks.models import ExportRoot

    settings.CONSOLE_EXPORTS = [tmp_path]
    ExportRoot.objects.create(org=org, path=str(tmp_path), added_by="test")
    return tmp_path


@pytest.fixture
def agent(org):
    return make_agent(org, "builder")


@pytest.fixture
def operator(org):
    return make_member(org, "olive", "operator")


@pytest.fixture
def viewer(org):
    return make_member(org, "victor", "viewer")


@pytest.fixture
def admin_user(org):
    return make_member(org, "ada", "admin")


def token_client(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


@pytest.fixture
def api(operator):
    return token_client(user_token(operator))


@pytest.fixture
def runner(org):
    return token_client(worker_token(org, "w1"))


@pytest.fixture
def make_token_client():
    return token_client


@pytest.fixture(scope="session")
def daphne_server(django_db_setup, django_db_blocker):
    """One live daphne for the session, on the test database, with a short lease.

    Tests using it must be `@pytest.mark.django_db(transaction=True)` so what
    they write is committed and visible to the server process.
    """
    from tests.processes import Server

    server = Server(CONSOLE_LEASE_SECONDS=3, CONSOLE_HEARTBEAT_SECONDS=1).start()
    yield server
    server.stop()
