# Fairsched: two commands on a fresh machine with Python 3.11+.
#   make run    the whole system on one machine (SQLite, bundled Redis, Temporal dev server)
#   make test   the whole suite, on SQLite and (when reachable) on PostgreSQL

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# axe-core, the accessibility checker the browser tests run in Chromium (npm, pinned in the lock file)
AXE    := tests/browser/node_modules/axe-core/axe.min.js
# The PostgreSQL server the suite also runs against (pytest-django creates and drops test_fairsched).
TEST_POSTGRES_URL ?= postgres://postgres@127.0.0.1:5432/fairsched
# The suite waits on real services much of the time: 3 workers on 2 cores halve its wall time.
# worksteal: a worker that runs out takes queued tests from the others, so the few long
# integration tests (30-50 s each) do not set the tail (PostgreSQL 4:30 here, 5:27 without).
# SQLite takes a fourth (5:11 with 3, 4:07 with 4 on 2026-12-04); PostgreSQL, whose server
# shares the 2 cores and whose pass holds only the tests that reach the database, does not
# (4:49 with 3, 5:04 with 4).
TEST_WORKERS ?= 3
SQLITE_TEST_WORKERS ?= 4
TEST_DIST ?= worksteal
PYTEST_ARGS ?=
# Bytecode caches, even where the environment says not to write them (PYTHONDONTWRITEBYTECODE,
# as on this project's CI machines): a pass starts some 150 Python processes (xdist workers,
# schedulers, workers, daphne), and without the caches pytest rewrote every test module in
# every xdist worker again (5% of a pass's CPU). They go to __pycache__, which git ignores.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: install run test test-sqlite test-postgres bench clean

install: $(STAMP) $(AXE)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required; set PYTHON=python3.11")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

$(AXE): tests/browser/package.json tests/browser/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		npm ci --prefix tests/browser --no-audit --no-fund --loglevel=error && touch $(AXE); \
	else \
		echo "*** npm is missing: the browser tests' accessibility check (axe-core) will fail; install Node.js and npm ***"; \
	fi

run: install
	$(BIN)/python manage.py runall

# With a PostgreSQL server, each pass runs its share (FAIRSCHED_TEST_PASS, tests/conftest.py:
# every test runs at least once, those that reach the database in both); without, SQLite runs all.
test: install
	@if $(BIN)/python scripts/pg_available.py '$(TEST_POSTGRES_URL)'; then \
		FAIRSCHED_TEST_PASS=sqlite $(MAKE) --no-print-directory test-sqlite; sqlite=$$?; \
		$(MAKE) --no-print-directory test-postgres && exit $$sqlite; \
	else \
		$(MAKE) --no-print-directory test-sqlite; \
		echo "*** SKIPPED the PostgreSQL run: no server at $(TEST_POSTGRES_URL) (set TEST_POSTGRES_URL) ***"; \
	fi

test-sqlite: install
	@echo "=== test suite on SQLite ==="
	DATABASE_URL= $(BIN)/python -m pytest -n $(SQLITE_TEST_WORKERS) --dist $(TEST_DIST) $(PYTEST_ARGS)

test-postgres: install
	@echo "=== test suite on PostgreSQL ($(TEST_POSTGRES_URL)) ==="
	FAIRSCHED_TEST_PASS=postgres DATABASE_URL='$(TEST_POSTGRES_URL)' $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist $(TEST_DIST) $(PYTEST_ARGS)

bench: install
	$(BIN)/python bench/core.py
	$(BIN)/python bench/fairness.py

clean:
	rm -rf $(VENV) var/test-artifacts .pytest_cache tests/browser/node_modules
