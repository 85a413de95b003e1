"""A backend's gate as its page shows it: the last evaluation, kept and refreshed in the background.

`evaluate_backend` judges the window's failures against every backend and prepares a month of
jobs: 0.1–0.3 s per backend (docs/performance.md), which every view of the backend page paid,
and which kept a new result from showing on the page for as long. `current_gate` serves the
evaluation kept in Django's cache (shared by every process in production):

- **current**: computed at the backend's current revision (`hud.core.revisions`: no result,
  re-run or sweeper close of this backend stored since), with the same gate policy and infra
  signatures files, as of at most `CRCR_GATE_SNAPSHOT_SECONDS` (default 300) before `now` and
  not after it: served as it is;
- **behind**: the same, but results of the backend were stored since: served, marked behind
  (the page says so), while `crcr.refresh_gate` evaluates it again in the background (at
  most one waits per backend); the page's next view, or its own refresh, shows the result;
- otherwise (none kept, too old, a file edited, or an exclusion, override or level change of
  the backend made since: its settings revision): evaluated at once and kept. A settings
  change of a backend with a kept evaluation also schedules a refresh once it commits, so
  only views in the meantime pay.

The age bound covers what no write of the backend changes: the gate's windows slide with
time, and a result of *another* backend on one of this backend's failing SHAs may corroborate
a failure and move the gate-adjusted pass rate. The page says which moment its gate is as of.
Everything that decides (requests, the daily evaluation, the API) evaluates live.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import pickle
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.db.models.signals import post_delete, post_save

from hud import attribution, gates
from hud.core import clock, files, revisions, taskqueue
from hud.models import Downstream, GateExclusion, LevelChange, LevelOverride
from hud.promotion.evaluation import BackendGate, evaluate_backend, evaluate_backends

logger = logging.getLogger(__name__)
# The version names the pickled shape (BackendGate and what it holds): bump it when that
# changes, so a release never reads what another one kept.
_KEY = "crcr:gate-snapshot:v1:{}"
_REFRESHING = "crcr:gate-refreshing:{}"
_REFRESH_LOCK_SECONDS = 120


def _config_version() -> tuple:
    """Which policy and signatures files an evaluation read, as `hud.core.files` tells them."""
    policy = gates.policy_path(getattr(settings, "CRCR_GATE_POLICY", None))
    return files.version(policy), files.version(attribution.signatures_path())


@dataclass(frozen=True)
class GateView:
    """The evaluation a page shows, and whether results arrived after it (being refreshed)."""

    gate: BackendGate
    behind: bool = False


def current_gate(downstream: Downstream, now: dt.datetime) -> GateView:
    """The kept evaluation of `downstream` as of a moment near `now` (see the module)."""
    token = _token(downstream.id)
    kept = _kept(downstream.id)
    if kept is not None:
        kept_token, gate = kept
        as_of = gate.evaluation.as_of
        recent = as_of <= now < as_of + _max_age()
        if recent and kept_token == token:
            return GateView(gate)
        # Only results arrived since: the settings and files it was evaluated with still hold.
        if recent and kept_token[1:] == token[1:]:
            _schedule_refresh(downstream.id)
            return GateView(gate, behind=True)
    return GateView(_evaluate_and_keep(downstream, now))


def refresh(downstream_id: int) -> None:
    """Evaluate a backend's gate now and keep it (the `crcr.refresh_gate` task)."""
    # Released before evaluating, so a result stored meanwhile can schedule the next refresh.
    cache.delete(_REFRESHING.format(downstream_id))
    downstream = Downstream.objects.filter(id=downstream_id).first()
    if downstream is not None:
        _evaluate_and_keep(downstream, clock.now())


def refresh_all() -> int:
    """Evaluate and keep the gate of every listed backend (a periodic job): with it running
    more often than the age bound, a page finds its gate kept, not only after its first view.
    They are evaluated together (`evaluate_backends`: one read judges every backend's
    failures). Should that fail, each is evaluated alone, so a backend whose evaluation fails
    is logged and left to its next view (which shows the error page as before) while the
    others are still kept. Returns how many were kept."""
    backends = list(Downstream.objects.filter(delisted=False).order_by("id"))
    # The tokens are read before the moment evaluated, as `_evaluate_and_keep` does: a result
    # stored in between changes a token, so what is kept then is never served as current.
    tokens = {downstream.id: _token(downstream.id) for downstream in backends}
    now = clock.now()
    try:
        # No transaction: on the embedded SQLite one takes the write lock for the whole of it.
        gates_by_id = evaluate_backends(backends, now)
    except Exception:
        logger.warning(
            "gate refresh of every backend at once failed; evaluating each alone", exc_info=True
        )
    else:
        for downstream in backends:
            _keep(downstream.id, tokens[downstream.id], gates_by_id[downstream.id])
        return len(backends)
    kept = 0
    for downstream in backends:
        try:
            # Its own moment, after the token it reads: results stored while the evaluation
            # together ran are in that token, so they must be in the evaluation too.
            _evaluate_and_keep(downstream, clock.now())
        except Exception:
            logger.exception("gate refresh failed", extra={"downstream": downstream.full_name})
            continue
        kept += 1
    return kept


def settings_changed(downstream_id: int, using: str | None = None) -> None:
    """An exclusion, override or level change of the backend: what was kept no longer stands,
    now and once the change commits (a reader in between evaluated the rows before it); then
    a refresh evaluates it with the change, so later views find it kept again."""
    revisions.bump(downstream_id, revisions.SETTINGS)
    transaction.on_commit(functools.partial(_committed, downstream_id), using=using)


def _committed(downstream_id: int) -> None:
    revisions.bump(downstream_id, revisions.SETTINGS)
    if cache.has_key(_KEY.format(downstream_id)):  # a backend no page has shown waits for one
        _schedule_refresh(downstream_id)


def _kept(downstream_id: int) -> tuple | None:
    try:
        return cache.get(_KEY.format(downstream_id))
    except (pickle.UnpicklingError, AttributeError, ImportError, TypeError, EOFError):
        # Kept by a worker of another release whose classes differ (a rolling deploy).
        logger.warning("kept gate evaluation unreadable", extra={"downstream": downstream_id})
        return None


def _max_age() -> dt.timedelta:
    return dt.timedelta(seconds=settings.CRCR_GATE_SNAPSHOT_SECONDS)


def _token(downstream_id: int) -> tuple:
    return (
        revisions.current(downstream_id, revisions.RESULTS),
        revisions.current(downstream_id, revisions.SETTINGS),
        _config_version(),
    )


def _evaluate_and_keep(downstream: Downstream, now: dt.datetime) -> BackendGate:
    # The tokens are read before evaluating: a write during the evaluation changes one, so
    # what is kept then is never served as current.
    token = _token(downstream.id)
    gate = evaluate_backend(downstream, now)
    _keep(downstream.id, token, gate)
    return gate


def _keep(downstream_id: int, token: tuple, gate: BackendGate) -> None:
    cache.set(
        _KEY.format(downstream_id), (token, gate), timeout=settings.CRCR_GATE_SNAPSHOT_SECONDS
    )


def _schedule_refresh(downstream_id: int) -> None:
    # At most one refresh waits per backend; the lock also lapses, should the task be lost.
    # It waits CRCR_GATE_REFRESH_DELAY_SECONDS: the reader that scheduled it is answered
    # first, and the rest of a burst of results (a workflow's jobs end together) is counted
    # by the same evaluation instead of each scheduling its own.
    delay = settings.CRCR_GATE_REFRESH_DELAY_SECONDS
    if cache.add(_REFRESHING.format(downstream_id), 1, timeout=_REFRESH_LOCK_SECONDS + delay):
        taskqueue.enqueue("crcr.refresh_gate", downstream_id, delay=delay)


def _bump_for(sender: Any, instance: Any, **kwargs: Any) -> None:
    downstream_id = instance.id if sender is Downstream else instance.downstream_id
    settings_changed(downstream_id, kwargs.get("using"))


def connect_signals() -> None:
    """Change a backend's settings revision whenever the ORM saves or deletes the backend, its
    exclusions, overrides or level changes (admins' actions, allowlist imports, the daily
    demotion), so the next view evaluates. Results have one writer of their revision:
    `hud.ingestion.derived.refresh_job`, which every stored attempt and sweeper close passes.
    """
    for model in (Downstream, GateExclusion, LevelChange, LevelOverride):
        for signal in (post_save, post_delete):
            signal.connect(_bump_for, sender=model, dispatch_uid=f"gate-revision-{model.__name__}")
