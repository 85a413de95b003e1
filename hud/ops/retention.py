"""Retention: forget failed-test details and raw webhook bodies older than a cutoff.

Job rows stay, so every statistic (pass rates, timings, gates) over any period is unchanged;
only the details a reviewer reads on a recent failure, and the raw delivery bodies kept for
debugging, go. Work is done in batches of short transactions so a large prune never holds
long locks against live ingestion.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass

from django.db import transaction
from django.db.models import QuerySet

from hud.core import clock
from hud.models import Delivery, FailedTest

logger = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 5000
Progress = Callable[[int], None]


@dataclass
class PruneReport:
    """What a prune removed (or, for a dry run, would remove)."""

    cutoff: dt.datetime
    dry_run: bool
    failed_tests: int = 0
    payloads: int = 0

    def lines(self) -> list[str]:
        """Readable lines for the management command."""
        verb = "would remove" if self.dry_run else "removed"
        return [
            f"Cutoff {self.cutoff.isoformat()} (jobs placed and deliveries received before it)",
            f"  {verb} {self.failed_tests} failed-test row(s)",
            f"  {verb} {self.payloads} raw delivery payload(s)",
            "  job rows kept: statistics over any period are unchanged",
        ]


def cutoff_for(days: int, now: dt.datetime | None = None) -> dt.datetime:
    """The moment `days` days before now."""
    if days < 0:
        raise ValueError("the retention period cannot be negative")
    return (now or clock.now()) - dt.timedelta(days=days)


def old_failed_tests(cutoff: dt.datetime) -> QuerySet[FailedTest]:
    """Failed tests of jobs placed before the cutoff."""
    return FailedTest.objects.filter(job__placed_at__lt=cutoff)


def old_payloads(cutoff: dt.datetime) -> QuerySet[Delivery]:
    """Deliveries received before the cutoff that still hold their raw body."""
    return Delivery.objects.filter(received_at__lt=cutoff, payload__isnull=False)


def prune_counts(cutoff: dt.datetime) -> PruneReport:
    """What a prune at `cutoff` would remove (nothing is changed)."""
    return PruneReport(
        cutoff=cutoff,
        dry_run=True,
        failed_tests=old_failed_tests(cutoff).count(),
        payloads=old_payloads(cutoff).count(),
    )


def _in_batches(
    next_ids: Callable[[], list[int]], apply: Callable[[list[int]], int], progress: Progress
) -> int:
    total = 0
    while True:
        with transaction.atomic():
            ids = next_ids()
            if not ids:
                return total
            done = apply(ids)
        total += done
        progress(done)


def prune(
    cutoff: dt.datetime,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    on_failed_tests: Progress | None = None,
    on_payloads: Progress | None = None,
) -> PruneReport:
    """Delete failed tests of jobs before `cutoff` and clear older raw payloads, in batches."""
    if batch_size < 1:
        raise ValueError("the batch size must be at least 1")
    report = PruneReport(cutoff=cutoff, dry_run=False)

    def failed_test_ids() -> list[int]:
        return list(old_failed_tests(cutoff).order_by().values_list("id", flat=True)[:batch_size])

    def delete_failed_tests(ids: list[int]) -> int:
        deleted, _ = FailedTest.objects.filter(id__in=ids).delete()
        return deleted

    def payload_ids() -> list[int]:
        return list(old_payloads(cutoff).order_by().values_list("id", flat=True)[:batch_size])

    def clear_payloads(ids: list[int]) -> int:
        return Delivery.objects.filter(id__in=ids).update(payload=None)

    report.failed_tests = _in_batches(
        failed_test_ids, delete_failed_tests, on_failed_tests or (lambda _: None)
    )
    report.payloads = _in_batches(payload_ids, clear_payloads, on_payloads or (lambda _: None))
    logger.info(
        "retention prune",
        extra={
            "cutoff": cutoff.isoformat(),
            "failed_tests": report.failed_tests,
            "payloads": report.payloads,
        },
    )
    return report
