"""`manage.py import_results FILE`: JSON lines of relay forward bodies loaded as history."""

import datetime as dt
import io
import json
import re

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from hud.models import Downstream, FailedTest, Job, Level, LevelChange, LogicalJob
from tests.conftest import NOW
from tests.support import builders

RAN_AT = NOW - dt.timedelta(days=10)


def iso(moment: dt.datetime) -> str:
    """A wire timestamp with a trailing Z."""
    return moment.isoformat().replace("+00:00", "Z")


def forward_line(
    *,
    job_name: str = "test-ops",
    status: str = "completed",
    conclusion: str | None = "success",
    at: dt.datetime = RAN_AT,
    repo: str = "org/repo",
    level: str = "L2",
    delivery_id: str = "delivery-1",
    run_id: int = 555,
    queue_time: float | None = 60.0,
    execution_time: float | None = 600.0,
    **workflow_extra,
) -> str:
    """One JSON line: a forward body for a job that ran at `at`."""
    if status == "completed":
        workflow_extra.setdefault("started_at", iso(at - dt.timedelta(minutes=10)))
        workflow_extra.setdefault("completed_at", iso(at))
    else:
        workflow_extra.setdefault("started_at", iso(at))
        workflow_extra.setdefault("completed_at", None)
    callback = builders.callback_body(
        repo,
        status=status,
        conclusion=conclusion,
        job_name=job_name,
        delivery_id=delivery_id,
        run_id=run_id,
        **workflow_extra,
    )
    body = builders.forward_body(
        callback, repo=repo, level=level, queue_time=queue_time, execution_time=execution_time
    )
    return json.dumps(body)


def write_lines(tmp_path, lines: list[str], name: str = "history.jsonl"):
    """Write `lines` as a JSON-lines file and return its path."""
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def run_import(path) -> tuple[str, str]:
    """Run the command without a progress bar; return (stdout, stderr)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    call_command("import_results", str(path), "--no-progress", stdout=stdout, stderr=stderr)
    return stdout.getvalue(), stderr.getvalue()


def summary_counts(stdout: str) -> dict[str, int]:
    """Parse the summary line ("3 created, 0 updated, … (N lines)") into counts."""
    line = stdout.strip().splitlines()[-1]
    counts = {key: int(number) for number, key in re.findall(r"(\d+) (\w+)", line)}
    counts["lines"] = int(re.search(r"\((\d+) lines\)", line).group(1))
    return counts


@pytest.mark.django_db
def test_good_lines_load_at_their_reported_times(tmp_path, frozen_clock):
    path = write_lines(
        tmp_path,
        [
            forward_line(job_name="build", at=RAN_AT, queue_time=12.0, execution_time=300.0),
            forward_line(
                job_name="test",
                at=RAN_AT + dt.timedelta(hours=1),
                conclusion="failure",
                failed_tests=[{"name": "test_add", "classname": "TestOps"}],
            ),
        ],
    )

    stdout, stderr = run_import(path)

    counts = summary_counts(stdout)
    assert counts["created"] == 2
    assert counts["rejected"] == 0
    assert counts["lines"] == 2
    assert stderr == ""
    build = Job.objects.get(job_name="build")
    assert build.placed_at == RAN_AT
    assert build.queue_seconds == 12.0
    assert build.execution_seconds == 300.0
    assert build.timing_source == Job.TimingSource.FORWARD
    assert build.source == Job.Source.IMPORT
    assert build.verified is False
    test = Job.objects.get(job_name="test")
    assert test.placed_at == RAN_AT + dt.timedelta(hours=1)
    assert test.conclusion == "failure"
    assert FailedTest.objects.get().job == test


@pytest.mark.django_db
def test_history_reported_ahead_of_the_clock_is_placed_at_its_import(tmp_path, frozen_clock):
    # An exporter whose clock runs a day ahead: its results are placed (and its level learnt)
    # when imported, inside today's windows, not a day from now outside all of them.
    ahead = NOW + dt.timedelta(days=1)
    path = write_lines(
        tmp_path,
        [
            forward_line(job_name="done", at=ahead, level="L3"),
            forward_line(job_name="running", status="in_progress", conclusion=None, at=ahead),
            forward_line(job_name="past", at=RAN_AT),
        ],
    )

    run_import(path)

    placed = dict(Job.objects.values_list("job_name", "placed_at"))
    assert placed == {"done": NOW, "running": NOW, "past": RAN_AT}
    layer = dict(LogicalJob.objects.values_list("job_name", "placed_at"))
    assert layer == placed
    learnt = LevelChange.objects.filter(downstream__full_name="org/repo")
    assert learnt.get(to_level=Level.L3).at == NOW
    assert not learnt.filter(at__gt=NOW).exists()


@pytest.mark.django_db
def test_import_learns_levels_back_dated_to_the_history(tmp_path, frozen_clock):
    path = write_lines(
        tmp_path,
        [
            forward_line(job_name="a", at=RAN_AT, level="L2"),
            forward_line(job_name="b", at=RAN_AT + dt.timedelta(days=5), level="L3"),
        ],
    )

    run_import(path)

    downstream = Downstream.objects.get(full_name="org/repo")
    assert downstream.level == Level.L3
    history = list(LevelChange.objects.filter(downstream=downstream).values_list("to_level", "at"))
    assert history == [(Level.L2, RAN_AT), (Level.L3, RAN_AT + dt.timedelta(days=5))]


@pytest.mark.django_db
def test_bad_lines_are_reported_with_line_numbers_and_the_rest_still_load(tmp_path, frozen_clock):
    bad_field = json.loads(forward_line(job_name="bad"))
    bad_field["trusted"]["ci_metrics"]["queue_time"] = "soon"
    path = write_lines(
        tmp_path,
        [
            forward_line(job_name="one"),
            '{"trusted": {',  # line 2: not JSON
            forward_line(job_name="three"),
            json.dumps(bad_field),  # line 4: fails validation
            forward_line(job_name="five", level="L1"),  # line 5: ignored, not an error
            forward_line(job_name="six"),
        ],
    )

    stdout, stderr = run_import(path)

    counts = summary_counts(stdout)
    assert counts == {
        "created": 3,
        "updated": 0,
        "duplicate": 0,
        "stale": 0,
        "ignored": 1,
        "rejected": 2,
        "lines": 6,
    }
    problems = stderr.strip().splitlines()
    assert len(problems) == 2
    assert problems[0].startswith("line 2: ")
    assert "JSON" in problems[0]
    assert problems[1].startswith("line 4: ")
    assert "trusted.ci_metrics.queue_time" in problems[1]
    assert sorted(Job.objects.values_list("job_name", flat=True)) == ["one", "six", "three"]


@pytest.mark.django_db
def test_blank_lines_are_skipped_but_still_counted_in_line_numbers(tmp_path, frozen_clock):
    path = tmp_path / "gaps.jsonl"
    path.write_text(forward_line(job_name="one") + "\n\n" + "not json\n", encoding="utf-8")

    stdout, stderr = run_import(path)

    assert summary_counts(stdout)["created"] == 1
    assert summary_counts(stdout)["rejected"] == 1
    assert stderr.strip().startswith("line 3: ")


@pytest.mark.django_db
def test_reimporting_the_same_file_reports_every_line_duplicate(tmp_path, frozen_clock):
    path = write_lines(tmp_path, [forward_line(job_name=f"job-{n}") for n in range(5)])
    run_import(path)
    frozen_clock.advance(hours=1)

    stdout, stderr = run_import(path)

    counts = summary_counts(stdout)
    assert counts["duplicate"] == 5
    assert counts["created"] == 0
    assert counts["rejected"] == 0
    assert stderr == ""
    assert Job.objects.count() == 5


@pytest.mark.django_db
def test_in_progress_then_completed_lines_for_one_job_are_created_then_updated(
    tmp_path, frozen_clock
):
    path = write_lines(
        tmp_path,
        [
            forward_line(
                status="in_progress",
                conclusion=None,
                at=RAN_AT - dt.timedelta(minutes=20),
                queue_time=45.0,
                execution_time=None,
            ),
            forward_line(
                status="completed",
                conclusion="failure",
                at=RAN_AT,
                queue_time=45.0,
                execution_time=1200.0,
            ),
        ],
    )

    stdout, _ = run_import(path)

    counts = summary_counts(stdout)
    assert counts["created"] == 1
    assert counts["updated"] == 1
    job = Job.objects.get()
    assert job.status == Job.Status.COMPLETED
    assert job.conclusion == "failure"
    assert job.placed_at == RAN_AT
    assert job.queue_seconds == 45.0
    assert job.execution_seconds == 1200.0


@pytest.mark.django_db
def test_conflicting_completed_line_is_rejected_and_the_first_result_kept(tmp_path, frozen_clock):
    path = write_lines(
        tmp_path,
        [
            forward_line(conclusion="success"),
            forward_line(conclusion="failure"),
        ],
    )

    stdout, stderr = run_import(path)

    counts = summary_counts(stdout)
    assert counts["created"] == 1
    assert counts["rejected"] == 1
    assert stderr.strip().startswith("line 2: conflict")
    assert Job.objects.get().conclusion == "success"


def test_missing_file_is_a_command_error(tmp_path):
    with pytest.raises(CommandError, match="is not a file"):
        call_command(
            "import_results",
            str(tmp_path / "absent.jsonl"),
            "--no-progress",
            stdout=io.StringIO(),
            stderr=io.StringIO(),
        )


@pytest.mark.django_db
def test_two_thousand_lines_import_across_batches(tmp_path, frozen_clock):
    lines = [
        forward_line(
            job_name=f"job-{n % 20}",
            delivery_id=f"delivery-{n // 20}",
            run_id=1000 + n,
            at=RAN_AT + dt.timedelta(minutes=n),
            conclusion="failure" if n % 10 == 0 else "success",
        )
        for n in range(2000)
    ]
    lines[1234] = "{broken"
    path = write_lines(tmp_path, lines)

    stdout, stderr = run_import(path)

    counts = summary_counts(stdout)
    assert counts["created"] == 1999
    assert counts["rejected"] == 1
    assert counts["lines"] == 2000
    assert stderr.strip().splitlines() == [stderr.strip().splitlines()[0]]
    assert stderr.startswith("line 1235: ")
    assert Job.objects.count() == 1999
    assert Job.objects.filter(conclusion="failure").count() == 200
    assert Downstream.objects.count() == 1
    latest = Job.objects.order_by("-placed_at").first()
    assert latest.placed_at == RAN_AT + dt.timedelta(minutes=1999)
