# Two commands for a newcomer: `make run` and `make test`. Everything installs into .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000
PYTEST_ARGS ?=

.PHONY: run test lint venv migrate demo clean screenshots

$(STAMP): requirements.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $(STAMP)

venv: $(STAMP)

migrate: venv
	$(PY) manage.py migrate --noinput

demo: migrate
	$(PY) manage.py seed_demo

## make run: install, migrate, load the demo history, serve http://127.0.0.1:8000 (embedded).
## DEBUG stays off, as in production: styled error pages, static files from whitenoise.
run: demo
	@echo "Serving CRCR HUD on http://$(HOST):$(PORT)/  (Ctrl-C to stop)"
	@trap 'kill 0' INT TERM EXIT; \
	$(PY) manage.py run_periodic --loop --interval 300 >/dev/null & \
	$(PY) manage.py runserver --noreload $(HOST):$(PORT)

## make test: the whole suite on whatever DATABASE_URL says (SQLite by default).
test: venv
	$(PY) -m pytest $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
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

## make reliability: the fuzz-marked reliability tests on PostgreSQL (the full 10,000-callback
## replay, PostgreSQL stopped mid-load). RELIABILITY_DATABASE_URL picks the server.
RELIABILITY_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/postgres
reliability: venv
	DATABASE_URL=$(RELIABILITY_DATABASE_URL) $(PY) -m pytest tests/reliability -m fuzz -s $(PYTEST_ARGS)
.PHONY: bench reliability
