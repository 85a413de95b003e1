"""`selectors.backend`: one backend by name, written out as plain SQL, is the row `backends()`
gives for it (any case, delisted or not, with the time of its last result)."""

import datetime as dt

import pytest

from hud.core.payload import parse_callback
from hud.ingestion import ingest
from hud.models import Job, Level
from hud.reads import selectors
from tests.conftest import NOW
from tests.support import builders


def _report(backend, run_id: int, at: dt.datetime, clock) -> None:
    clock.set(at)
    body = builders.callback_body(backend.full_name, run_id=run_id, job_name=f"job-{run_id}")
    ingest.store(backend, parse_callback(body, backend.full_name), source=Job.Source.CALLBACK)


@pytest.mark.django_db
def test_backend_is_found_in_any_case_with_its_newest_result(frozen_clock):
    backend = builders.downstream("Org/Repo", Level.L3)
    _report(backend, 1, NOW - dt.timedelta(days=2), frozen_clock)
    _report(backend, 2, NOW - dt.timedelta(hours=1), frozen_clock)

    found = selectors.backend("oRG/rEPO")

    assert (found.pk, found.full_name, found.level) == (backend.pk, "Org/Repo", Level.L3)
    assert found.last_result_at == NOW - dt.timedelta(hours=1)
    assert found.last_result_at.utcoffset() == dt.timedelta(0)
    listed = selectors.backends().get(pk=backend.pk)
    assert found.last_result_at == listed.last_result_at
    assert found.created_at == listed.created_at


@pytest.mark.django_db
def test_delisted_backend_is_found_and_one_without_results_has_no_last_result():
    builders.downstream("gone/repo", Level.L2, delisted=True)

    found = selectors.backend("gone/repo")

    assert found.delisted is True
    assert found.last_result_at is None
    assert selectors.backend("nobody/here") is None
