# The two commands of the README: `make run` and `make test`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python

# Django 6 needs Python >= 3.12; the machine's default python3 may be older
# and pyenv shims may exist without a selected version, so try each for real.
PYTHON ?= $(shell for p in python3.13 python3.12 $$(ls -d $$HOME/.pyenv/versions/3.13*/bin/python3 $$HOME/.pyenv/versions/3.12*/bin/python3 /usr/bin/python3.13 /usr/bin/python3.12 2>/dev/null); do \
	if $$p -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; then command -v $$p; break; fi; done)

.PHONY: run test test-fast lint bench venv browser axe clean

# The SDK (sdk/, import recovery_console) is a package of its own: installed editable beside the project, so the
# reference worker and the SDK tests run the checkout's code, with its pydantic-ai extra (the adapter's tests use it).
# The server never imports it (an import-linter contract).
$(VENV)/.installed: pyproject.toml sdk/pyproject.toml
	@if [ -z "$(PYTHON)" ]; then echo "error: Python >= 3.12 is required (tried python3.13, python3.12, pyenv versions)." >&2; exit 1; fi
	@[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check ".[test]"
	$(PY) -m pip install --quiet --disable-pip-version-check -e './sdk[pydantic-ai]'
	@touch $@

venv: $(VENV)/.installed

# Debian's Chromium drives the browser tests (never `playwright install`).
browser:
	@if [ ! -x /usr/bin/chromium ]; then \
		if [ "$$(id -u)" = 0 ]; then (apt-get update -qq && apt-get install -y -qq chromium) >/dev/null; \
		else echo "error: /usr/bin/chromium is missing: sudo apt-get install -y chromium" >&2; exit 1; fi; fi

# axe-core for the accessibility tests, from the npm registry, exactly as package-lock.json pins it.
node_modules/.installed: package.json package-lock.json
	@command -v npm >/dev/null || { echo "error: npm is missing (the accessibility tests inject axe-core from node_modules)" >&2; exit 1; }
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

axe: node_modules/.installed

run: venv
	@bin/run

# pytest-xdist: three workers, handing out tests as workers free up (worksteal). Each has its own test database
# and workspaces root; the real-process tests spend much of their time waiting on workers and leases, so a third
# worker keeps this machine's 2 cores busy (the suite: 12:29 with two, 10:08 with three). TEST_WORKERS=0 runs
# serially.
TEST_WORKERS ?= 3 --dist worksteal
test: venv browser axe
	$(PY) -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)

test-fast: venv
	$(PY) -m pytest -m "not browser and not slow" $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(PY) bin/lint_house.py

# The bench's peers (procrastinate) are an extra of their own: the product never imports them.
$(VENV)/.bench-installed: pyproject.toml $(VENV)/.installed
	$(PY) -m pip install --quiet --disable-pip-version-check ".[test,bench]"
	@touch $@

bench: venv $(VENV)/.bench-installed
	$(PY) -m bench $(BENCH_ARGS)

clean:
	rm -rf var/workspaces var/test-workspaces* var/*.sqlite3*
