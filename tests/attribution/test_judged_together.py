"""A verdict is the same whatever else is judged in the same call: the page of one PR, a
backend's gate, or every backend's gates at once (hud.promotion.evaluate_backends).

Each judged job counts the runs of its job in its own window (14 days before and after). A
count per head SHA over the union of every judged job's window let a failure 16 days before
the judged job in, once another judged job 10 days back widened the window."""

import json

from hud import attribution, promotion
from hud.models import Downstream, Job, Level
from tests.attribution.conftest import DAY, HOUR, NOW, sha

A, B = "org/npu", "org/spyre"


def _two_backends_with_an_old_rerun(h, pr: int) -> None:
    """A and B; A's job green on four unrelated PRs, and PR `pr` failed 16 days back (outside a
    job's window judged now) with its re-run passed 13 days back (inside)."""
    h.backend(A, Level.L2)
    h.backend(B, Level.L2)
    for index in range(4):
        h.job(A, at=NOW - (2 + index) * DAY, head=sha(f"ok-{index}"), pr=10 + index,
              conclusion="success")  # fmt: skip
    h.job(A, at=NOW - 16 * DAY, head=sha(f"pr{pr}-old"), pr=pr, run_id=555, attempt=1)
    h.job(A, at=NOW - 13 * DAY, head=sha(f"pr{pr}-old"), pr=pr, run_id=555, attempt=2,
          conclusion="success")  # fmt: skip


def test_a_verdict_counts_the_runs_in_its_own_window_whatever_else_is_judged(history):
    h = history
    # The old failure is an earlier push of the judged job's own PR; it has no failed tests.
    _two_backends_with_an_old_rerun(h, pr=1)
    judged = h.job(A, at=NOW - HOUR, head=sha("pr1-new"), pr=1)
    other = h.job(B, at=NOW - 10 * DAY, head=sha("b"), pr=2)
    alone = attribution.verdicts_for([{"id": judged, **_key_of(judged)}], until=NOW)
    together = attribution.verdicts_for(
        [{"id": judged, **_key_of(judged)}, {"id": other, **_key_of(other)}], until=NOW
    )
    mine = [item for item in together if item["job_id"] == judged]
    assert mine == alone
    # The failure 16 days back reproduces nothing in this job's window.
    assert alone[0]["evidence"]["job_reproduced"] == 0


def test_a_corroborated_breakage_is_excluded_from_the_gate_alone_and_together(history):
    h = history
    _two_backends_with_an_old_rerun(h, pr=20)  # another PR's
    # PR 1 breaks both backends on the same SHA; B failed another PR 10 days back.
    breaking = h.job(A, at=NOW - HOUR, head=sha("pr1"), pr=1)
    h.job(B, at=NOW - HOUR, head=sha("pr1"), pr=1)
    h.job(B, at=NOW - 10 * DAY, head=sha("pr2"), pr=2)
    backends = list(Downstream.objects.order_by("id"))
    together = promotion.evaluate_backends(backends, as_of=NOW)
    for item in backends:
        alone = promotion.evaluate_backend(item, as_of=NOW)
        assert json.dumps(together[item.id].to_dict(), sort_keys=True, default=str) == json.dumps(
            alone.to_dict(), sort_keys=True, default=str
        ), item.full_name
    excluded = together[backends[0].id].adjusted["excluded"]
    assert [item["job_id"] for item in excluded] == [breaking]


def _key_of(job_id: int) -> dict:
    job = Job.objects.select_related("downstream").get(id=job_id)
    return {
        "downstream": job.downstream.full_name,
        "event_type": job.event_type,
        "head_sha": job.head_sha,
        "workflow_name": job.workflow_name,
        "job_name": job.job_name,
    }
