"""A verdict's cross-commit evidence, as `hud.attribution.evidence` reads it (`_cross_commit_rows`:
runs as tuples per judged job's span) and counts it (`_cross_commit`), equals its definition
read off every stored attempt.

The definition, per judged job (docs/attribution.md, rules 4-6): over the completed runs of
its backend, workflow and job placed in [placed_at - 14 days, min(placed_at + 14 days, until)),
the unrelated origins (a PR, else the commit) it ran and failed on; its failed runs on its own
origin less its own head SHA's; and per failed test, the unrelated origins that test failed on
(any job of the backend, same window) and the union of those with the origins it ran on."""

import datetime as dt
from collections import defaultdict

import pytest

from hud import attribution
from hud.attribution import evidence
from hud.attribution.identity import failed_test_id, failure_signature, origin_of
from hud.models import FailedTest, Job
from tests.attribution.conftest import DAY, HOUR, failed, sha
from tests.conftest import NOW
from tests.support import attribution_sim

REPO = "org/npu"

WINDOW = dt.timedelta(days=14)


def _origin(job: Job) -> str:
    return origin_of(job.pr_number, job.event_type, job.head_sha)


def _kinds(origins: set[str]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for origin in origins:
        counts["pr" if origin.startswith("pr#") else origin.split(":")[0]] += 1
    return dict(counts)


def _expected(item: dict, until: dt.datetime) -> dict:
    """The cross-commit figures of verdict `item`, from every attempt and failed test."""
    judged = Job.objects.get(id=item["job_id"])
    placed = dt.datetime.fromisoformat(item["placed_at"])
    start, end = placed - WINDOW, min(placed + WINDOW, until)
    mine = _origin(judged)
    runs = list(
        Job.objects.filter(
            downstream=judged.downstream,
            workflow_name=judged.workflow_name,
            job_name=judged.job_name,
            status=Job.Status.COMPLETED,
            placed_at__gte=start,
            placed_at__lt=end,
        )
    )
    ran = {_origin(run) for run in runs} - {mine}
    failed = {_origin(run) for run in runs if run.conclusion == "failure"} - {mine}
    on_mine = [run for run in runs if _origin(run) == mine]
    tests = {}
    for test in FailedTest.objects.filter(job=judged):
        test_id = failed_test_id(test.classname, test.name)
        # Each attempt's failure of the test once per distinct message.
        failures = {
            (other.job_id, _origin(other.job), other.message)
            for other in FailedTest.objects.select_related("job").filter(
                job__downstream=judged.downstream,
                job__placed_at__gte=start,
                job__placed_at__lt=end,
                name=test.name,
            )
            if failed_test_id(other.classname, other.name) == test_id
        }
        elsewhere = {origin for _, origin, _ in failures} - {mine}
        signatures = {
            failure_signature(t.message)
            for t in FailedTest.objects.filter(job=judged)
            if failed_test_id(t.classname, t.name) == test_id
        }
        tests[test_id] = {
            "failed_elsewhere": len(elsewhere),
            "failed_elsewhere_same_way": len(
                {o for _, o, m in failures if failure_signature(m) in signatures} - {mine}
            ),
            "ran_elsewhere": len(ran | elsewhere),
            "reproduced": sum(1 for job, o, _ in failures if job != judged.id and o == mine),
        }
    return {
        "ran_elsewhere": len(ran),
        "job_failed_elsewhere": len(failed),
        "failed_kinds": _kinds(failed),
        "job_reproduced": sum(run.conclusion == "failure" for run in on_mine)
        - any(run.head_sha == judged.head_sha for run in on_mine),
        "tests": tests,
    }


# The figures of a failed test that `_expected` states.
TEST_FIGURES = ("failed_elsewhere", "failed_elsewhere_same_way", "ran_elsewhere", "reproduced")


def _counted(evidence: dict) -> dict:
    """What `_expected` states, as the verdict's evidence gives it."""
    return {
        "ran_elsewhere": evidence["ran_elsewhere"],
        "job_failed_elsewhere": evidence["job_failed_elsewhere"],
        "failed_kinds": _kinds_of_words(evidence["job_where"]),
        "job_reproduced": evidence["job_reproduced"],
        "tests": {t["test"]: {key: t[key] for key in TEST_FIGURES} for t in evidence["tests"]},
    }


def _kinds_of_words(where: str) -> dict[str, int]:
    """{"pr": 9, "push": 2} from "9 other PRs and 2 trunk pushes" (`ORIGIN_WORDS`)."""
    words = {word: kind for kind, pair in attribution.ORIGIN_WORDS.items() for word in pair}
    counts = {}
    for part in where.replace(" and ", ", ").split(", ") if where else []:
        count, word = part.split(" ", 1)
        counts[words.get(word, word)] = int(count)
    return counts


@pytest.mark.django_db
@pytest.mark.parametrize(("seed", "days_back"), [(5, 0), (17, 3)])
def test_cross_commit_evidence_equals_its_definition(frozen_clock, seed, days_back):
    attribution_sim.simulate(seed, attribution_sim.SMALL, NOW, frozen_clock)
    until = NOW - dt.timedelta(days=days_back)
    keys = attribution_sim.judged_keys(until)
    checked = [
        item
        for item in attribution.verdicts_of(keys, until=until)
        if item["evidence"] and "window_days" in item["evidence"]
    ]
    for item in checked:
        assert _counted(item["evidence"]) == _expected(item, until), item["job_id"]
    # The cases the counting must get right occur: a test failing on some of the origins its
    # job ran on, a failure reproduced on its own origin, failures of several kinds.
    tests = [t for item in checked for t in item["evidence"]["tests"]]
    assert any(t["ran_elsewhere"] > t["failed_elsewhere"] > 0 for t in tests)
    assert any(item["evidence"]["job_reproduced"] > 0 for item in checked) or any(
        t["reproduced"] for t in tests
    )
    kinds = {kind for item in checked for kind in _counted(item["evidence"])["failed_kinds"]}
    assert len(kinds) > 1, kinds


def test_a_test_failing_where_its_job_did_not_run_counts_that_origin_once(history):
    """Another job of the backend fails the test on a PR the judged job never ran on: that PR
    counts among the runs elsewhere, once, beside the origins the judged job ran on."""
    h = history
    h.backend(REPO)
    h.passes_elsewhere(REPO, count=3)
    flaky = [failed("test_add")]
    # test-nn fails the same test on PR 2 (where test-ops did not run) and on a trunk push
    # where test-ops passed; the judged test-ops job fails it on PR 1.
    h.job(REPO, at=NOW - 3 * DAY, head=sha("pr2"), pr=2, job="test-nn", tests=flaky)
    h.job(REPO, at=NOW - 2 * DAY, head=sha(f"green-{REPO}-test-ops-0"), event="push",
          job="test-nn", tests=flaky)  # fmt: skip
    judged = h.job(REPO, at=NOW - HOUR, head=sha("pr1"), pr=1, tests=flaky)
    [item] = attribution.verdicts_for([Job.objects.select_related("downstream").get(id=judged)])
    [test] = item["evidence"]["tests"]
    assert (item["evidence"]["ran_elsewhere"], test["failed_elsewhere"]) == (3, 2)
    assert test["ran_elsewhere"] == 4  # three pushes and PR 2
    assert _counted(item["evidence"]) == _expected(item, NOW)


@pytest.mark.django_db
def test_runs_of_many_judged_jobs_are_read_in_bounded_chunks():
    """1,200 judged backends/workflows/jobs: each read names at most 200 spans, so SQLite (which
    refuses an OR chain deeper than 1,000) runs every one of them."""
    judged = [
        {"downstream_id": n % 50 + 1, "workflow_name": "ci", "job_name": f"job-{n}",
         "placed_at": NOW - dt.timedelta(hours=n)}
        for n in range(1200)
    ]  # fmt: skip
    reads = evidence._of_judged_jobs(judged, WINDOW, NOW)
    assert len(reads) == 6
    for spans in reads:
        assert list(Job.objects.filter(spans).values_list("id", flat=True)) == []
