# Two commands for a newcomer: `make run` and `make test`. Everything installs into .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000
PYTEST_ARGS ?=
# pytest-xdist workers for `make test`: one per core (TEST_WORKERS=0 runs in one process).
TEST_WORKERS ?= auto

.PHONY: run test lint venv migrate demo clean screenshots

# uv installs the pinned requirements in seconds; its own pin is the `uv==` line of
# requirements-dev.txt. Where uv cannot be installed (no wheel for the platform), pip installs
# the same pins.
UV_PIN = $$(grep -m1 '^uv==' requirements-dev.txt)
PIP := $(PY) -m pip install --quiet --disable-pip-version-check

$(STAMP): requirements.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	if $(PIP) "$(UV_PIN)"; then \
		$(VENV)/bin/uv pip install --quiet --python $(PY) -r requirements-dev.txt; \
	else \
		echo "uv unavailable; installing with pip"; $(PIP) -r requirements-dev.txt; \
	fi
	touch $(STAMP)

venv: $(STAMP)

migrate: venv
	$(PY) manage.py migrate --noinput

demo: migrate
	$(PY) manage.py seed_demo

# `make run` migrates and seeds only when the embedded database is missing, or older than the
# installed packages or a migration, so a second run starts serving at once. With another
# DATABASE_URL it always does both (seed_demo leaves a database that holds backends alone).
DEMO_STAMP := $(VENV)/.demo-seeded
DEMO_DB_READY := $(if $(DATABASE_URL),,$(wildcard db.sqlite3))
$(DEMO_STAMP): $(STAMP) $(wildcard hud/migrations/0*.py) $(if $(DEMO_DB_READY),,FORCE)
	$(PY) manage.py migrate --noinput
	$(PY) manage.py seed_demo
	touch $@

.PHONY: FORCE
FORCE:

## make run: install, migrate, load the demo history, serve http://$(HOST):$(PORT) (embedded).
## DEBUG stays off, as in production: styled error pages, static files from whitenoise.
## The system checks ran in migrate; the server skips them to answer sooner.
run: $(DEMO_STAMP)
	@echo "Serving CRCR HUD on http://$(HOST):$(PORT)/  (Ctrl-C to stop)"
	@trap 'kill 0' INT TERM EXIT; \
	$(PY) manage.py run_periodic --loop --interval 300 >/dev/null & \
	$(PY) manage.py runserver --noreload --skip-checks $(HOST):$(PORT)

## make test: the whole suite on whatever DATABASE_URL says (SQLite by default), on every
## core; tests that start browsers, workers or servers run one at a time (tests/conftest.py).
test: venv
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(PY) manage.py makemigrations --check --dry-run

clean:
	rm -rf $(VENV) db.sqlite3* test-db.sqlite3* staticfiles

## make screenshots: one PNG per page into docs/screenshots/ (the README tour), taken in headless
## Chromium (Debian `chromium chromium-driver`; symbols need only fonts-dejavu-core). Not a test.
screenshots: demo
	$(PY) bench/screenshots.py

## make bench: ingestion throughput against its floor (bench/ingest.py), GitHub calls per
## mirrored job and gate (bench/mirror.py), page timings at 100k and 1M jobs (bench/pages.py).
## Ingest and mirror create and drop their own databases on BENCH_PG; pages fills two
## databases there the first time (minutes) and keeps them for re-measuring.
BENCH_PG ?= postgres://postgres@127.0.0.1:5432
bench: venv
	$(PY) bench/ingest.py --pg $(BENCH_PG)
	$(PY) bench/mirror.py --pg $(BENCH_PG)
	BENCH_PG=$(BENCH_PG) $(PY) bench/pages.py

## make reliability: every reliability test on PostgreSQL, the fuzz-marked ones included (the
## full 10,000-callback replay, PostgreSQL stopped mid-load, odd values in every body field,
## the crawl of every route with odd queries, schemathesis with more examples) and the odd-input
## tests of each endpoint (docs/reliability.md). RELIABILITY_DATABASE_URL picks the server.
RELIABILITY_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/postgres
FUZZ_EXAMPLES ?= 500
SCHEMATHESIS_EXAMPLES ?= 100
ODD_INPUT_TESTS := tests/api/test_odd_inputs.py tests/pages/test_odd_queries.py \
	tests/relay/test_odd_webhooks.py
reliability: venv
	DATABASE_URL=$(RELIABILITY_DATABASE_URL) CRCR_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) \
	CRCR_SCHEMATHESIS_EXAMPLES=$(SCHEMATHESIS_EXAMPLES) \
	$(PY) -m pytest tests/reliability $(ODD_INPUT_TESTS) -s $(PYTEST_ARGS)
.PHONY: bench reliability
