"""`pip install ./sdk` gives a package that runs without Django or the server's code."""

import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.processes import ROOT

pytestmark = pytest.mark.slow

# httpx and what it needs: the SDK's whole dependency closure.
CLOSURE = ("httpx", "httpcore", "h11", "anyio", "sniffio", "idna", "certifi", "typing_extensions")


def test_the_sdk_builds_as_a_wheel_that_imports_where_only_httpx_is_installed(tmp_path):
    # Built from a copy: setuptools leaves a build/ directory beside the sources it builds.
    source = tmp_path / "sdk"
    shutil.copytree(ROOT / "sdk", source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp_path, source],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert built.returncode == 0, built.stderr
    wheel = next(tmp_path.glob("recovery_console-*.whl"))
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    assert not (site / "tasks").exists() and not (site / "console").exists()  # the SDK alone
    for name in CLOSURE:
        spec = importlib.util.find_spec(name)
        if spec is None:
            continue
        origin = Path(spec.submodule_search_locations[0]) if spec.submodule_search_locations else Path(spec.origin)
        (site / origin.name).symlink_to(origin)
    # -S: no site-packages at all (no Django); the interpreter sees the standard library and `site` only.
    code = (
        f"import sys; sys.path.insert(0, {str(site)!r})\n"
        "import importlib.util\n"
        "assert importlib.util.find_spec('django') is None, 'Django is reachable: the check proves nothing'\n"
        "import recovery_console\n"
        "from recovery_console import Console, Tool, serve, Notice, Diverged, LeaseLost, StopRequested\n"
        "assert not any(m.split('.')[0] in ('django', 'tasks', 'recovery', 'console') for m in sys.modules)\n"
        "print(recovery_console.__file__)\n"
    )
    ran = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip().startswith(str(site))
