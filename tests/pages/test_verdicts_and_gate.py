"""The PR and commit pages: our verdicts with evidence, the merge gate, check runs, bisect hints."""

import datetime as dt

import pytest

from hud import attribution
from hud.models import Level
from tests.attribution.conftest import History, failed
from tests.conftest import NOW
from tests.pages.conftest import sha
from tests.support import builders

L4, L2 = "acc/blocking", "acc/onboarding"
PR = 175_000
HEAD = sha("reviewed-head")
TRUNK = sha("trunk-green")
DAY = dt.timedelta(days=1)
TRIAGE = {
    "schema_version": "1",
    "category": "upstream",
    "confidence": "medium",
    "summary": "<b>looks like</b> the addmm change",
}


def dispatch_pr(number: int, head: str, backends: list[str], at: dt.datetime) -> None:
    """A stored pull_request delivery for `head`, dispatched to `backends`."""
    delivery = builders.delivery(
        f"d-pr-{number}-{head[:8]}", number=number, sha=head, received_at=at
    )
    for name in backends:
        builders.dispatch(delivery, builders.Downstream.objects.get(full_name=name), at)


def seed_reviewed_pr(clock, *, number: int = PR, head: str = HEAD, trunk: bool = True) -> None:
    """L4 green on trunk and red on the PR, corroborated by L2 failing the same test on the
    head (likely caused by the PR); L2 red on trunk too (already broken on trunk)."""
    history = History(clock)
    if trunk:
        history.backend(L4, Level.L4)
        history.backend(L2, Level.L2)
        for days in (4, 3):
            history.job(
                L4, at=NOW - days * DAY, head=sha(f"trunk-{days}"), event="push",
                conclusion="success",
            )  # fmt: skip
        history.job(L4, at=NOW - 2 * DAY, head=TRUNK, event="push", conclusion="success")
        history.job(L2, at=NOW - 2 * DAY, head=TRUNK, event="push", tests=[failed("test_add")])
    dispatch_pr(number, head, [L4, L2], NOW - 3 * dt.timedelta(hours=1))
    at = NOW - dt.timedelta(hours=2)
    history.job(L4, at=at, head=head, pr=number, job="build", conclusion="success")
    history.job(L4, at=at, head=head, pr=number, tests=[failed("test_add")], triage_verdict=TRIAGE)
    history.job(L2, at=at, head=head, pr=number, tests=[failed("test_add")])


@pytest.fixture
def reviewed(db, frozen_clock):
    """A PR whose L4 failure is upstream-likely and whose L2 failure is broken downstream."""
    seed_reviewed_pr(frozen_clock)


def text(response) -> str:
    """The body of a rendered page."""
    assert response.status_code == 200
    return response.content.decode()


def test_pr_page_shows_our_verdict_per_failing_job_with_badge_summary_and_evidence(
    client, reviewed
):
    body = text(client.get(f"/crcr/pr/{PR}"))
    jobs = {
        (r.job.downstream.full_name, r.job.job_name): r
        for s in client.get(f"/crcr/pr/{PR}").context["data"].sections
        for r in s.jobs
    }

    ours = jobs[(L4, "test-ops")].verdict
    assert ours["verdict"] == attribution.UPSTREAM_LIKELY
    assert jobs[(L2, "test-ops")].verdict["verdict"] == attribution.BROKEN_DOWNSTREAM
    assert jobs[(L4, "build")].verdict["verdict"] is None
    badge = ours["badge"]
    assert (
        f'data-verdict="upstream_likely" title="{badge["meaning"]}">'
        f"{badge['symbol']} {badge['word']}</span>"
    ) in body
    assert ours["summary"] in body
    evidence = body.split('data-our-verdict="upstream_likely"', 1)[1].split("</details>", 1)[0]
    assert "<details" in evidence and "new_to_this_pr" in evidence and "strong" in evidence
    assert "ran on 3 unrelated commits" in evidence
    assert L2 in evidence and "test_ops.TestOps::test_add" in evidence  # other backends
    assert f'href="/crcr/{L4}/tests/test_ops.TestOps::test_add"' in evidence  # its history
    broken = body.split('data-our-verdict="broken_downstream"', 1)[1].split("</details>", 1)[0]
    assert "Overlapping tests" in broken and "test_ops.TestOps::test_add" in broken


def test_pr_page_answers_first_one_line_per_failing_job_in_plain_words(
    client, reviewed, frozen_clock
):
    history = History(frozen_clock)  # the reviewed PR plus a backend that passes on it
    history.backend("acc/green", Level.L3)
    history.job("acc/green", at=NOW - dt.timedelta(hours=2), head=HEAD, pr=PR, conclusion="success")
    response = client.get(f"/crcr/pr/{PR}")
    body = text(response)

    answer = body.split('id="answer"', 1)[1].split("</section>", 1)[0]
    assert body.index('id="answer"') < body.index('id="gate"') < body.index('id="verdicts"')
    lines = answer.split("<li data-verdict=")[1:]
    assert [line.split('"')[1] for line in lines] == ["upstream_likely", "broken_downstream"]
    assert f'data-backend="{L4}"' in lines[0] and "likely caused by this PR" in lines[0]
    assert f"{L2} also fail the same test(s) on this SHA" in lines[0]
    assert f'href="/crcr/{L4}/tests/test_ops.TestOps::test_add"' in lines[0]
    assert "already broken on trunk" in lines[1] and "judged" in lines[1]
    passing = answer.split('id="passing-backends"', 1)[1]
    assert "1 backend passing" in passing and "acc/green" in passing
    sections = [s.backend.full_name for s in response.context["data"].sections]
    assert sections == [L4, L2, "acc/green"]  # failing backends first


def test_check_runs_table_is_collapsed_when_nothing_was_mirrored(client, db, frozen_clock):
    history = History(frozen_clock)
    history.backend(L2, Level.L2)
    history.job(L2, at=NOW - DAY, head=HEAD, pr=PR, tests=[failed("test_add")])
    body = text(client.get(f"/crcr/pr/{PR}"))
    assert '<details class="check-runs-box" id="check-runs-box">' in body
    assert "(none sent)" in body


def test_check_runs_start_open_once_any_was_sent_or_is_being_sent():
    from hud.pages import ResultsPage

    runs = [{"sync": "not_mirrored"}, {"sync": "pending"}]
    assert ResultsPage([], [], check_runs=runs).any_mirrored
    assert not ResultsPage([], [], check_runs=runs[:1]).any_mirrored


def test_pr_page_shows_the_self_reported_triage_beside_ours_labelled_advisory(client, reviewed):
    body = text(client.get(f"/crcr/pr/{PR}"))

    row = body.split('data-our-verdict="upstream_likely"', 1)[1].split("</tr>", 1)[0]
    assert "advisory (self-reported)" in row and "<strong>upstream</strong>" in row
    assert "&lt;b&gt;looks like&lt;/b&gt;" in row  # the backend's text is escaped


def test_pr_page_counts_verdicts_at_the_top(client, reviewed):
    response = client.get(f"/crcr/pr/{PR}")
    data = response.context["data"]
    body = text(response)

    counts = {item["verdict"]: item["count"] for item in data.verdict_summary}
    assert counts == {**dict.fromkeys(attribution.VERDICTS, 0), "upstream_likely": 1,
                      "broken_downstream": 1}  # fmt: skip
    assert data.judged == 2 and "2 failing jobs judged" in body
    assert body.index('id="verdicts"') < body.index("backend-results")


def test_pr_page_shows_the_gate_decision_first_with_lists_and_rule(client, reviewed):
    body = text(client.get(f"/crcr/pr/{PR}"))

    gate = body.split('id="gate"', 1)[1].split("</section>", 1)[0]
    assert 'data-gate-state="failure"' in gate and "1 L4 job(s) failed" in gate
    blocking = gate.split('data-gate-group="blocking"', 1)[1].split("</ul>", 1)[0]
    assert L4 in blocking and "test-ops" in blocking
    assert '<details class="rule"><summary>The rule</summary>' in gate
    assert body.index('id="gate"') < body.index('id="verdicts"') < body.index("backend-results")


def test_pr_page_links_the_gate_check_run_when_github_has_it(client, reviewed):
    from hud.models import GateCheck

    GateCheck.objects.create(
        head_sha=HEAD,
        created_at=NOW,
        check_run_id=77,
        html_url="https://github.com/pytorch/pytorch/runs/77",
    )
    gate = text(client.get(f"/crcr/pr/{PR}")).split('id="gate"', 1)[1].split("</section>", 1)[0]
    assert 'href="https://github.com/pytorch/pytorch/runs/77"' in gate


def test_pr_page_without_dispatch_says_there_is_no_gate(client, seeded):
    body = text(client.get("/crcr/pr/170000"))
    assert "there is no <code>crcr/gate</code> check" in body


def test_pr_page_lists_mirrored_check_runs_with_why_not_mirrored(client, reviewed):
    response = client.get(f"/crcr/pr/{PR}")
    body = text(response)

    table = body.split('id="check-runs-table"', 1)[1].split("</table>", 1)[0]
    assert table.count("<tr data-sync=") == 3
    assert f"crcr/{L4}/crcr/test-ops" in table
    assert "not mirrored because L2: check runs start at L3" in table
    # No GitHub App here: nothing was sent, so the table is there but starts collapsed.
    assert '<details class="check-runs-box" id="check-runs-box">' in body


def test_commit_page_shows_verdicts_and_a_bisect_hint_per_failing_backend(client, reviewed):
    response = client.get(f"/crcr/commit/{HEAD}")
    body = text(response)

    table = body.split('id="cross-backend-table"', 1)[1].split("</table>", 1)[0]
    l4_row = table.split(f'data-backend="{L4}"', 1)[1].split("</tr>", 1)[0]
    assert 'data-verdict="upstream_likely"' in l4_row
    assert f'href="/crcr/commit/{TRUNK}"' in l4_row  # last green
    l2_row = table.split(f'data-backend="{L2}"', 1)[1].split("</tr>", 1)[0]
    assert 'data-verdict="broken_downstream"' in l2_row
    assert f'href="/crcr/commit/{TRUNK}"' in l2_row  # first red
    assert "advisory (self-reported)" in body and 'id="verdicts"' in body
    assert 'id="gate"' not in body


# --------------------------------------------------------------------------- backend page


@pytest.fixture
def with_infra_failure(reviewed, frozen_clock):
    """The L2 backend also lost its runner on a PR: an infra signature, left out of the
    adjusted rate (like its PR failure already broken on trunk), while a timeout stays in."""
    history = History(frozen_clock)
    lost = failed("runner", "infra", "runner lost communication with the server")
    history.job(L2, at=NOW - DAY, head=sha("infra-pr"), pr=PR + 1, tests=[lost])
    history.job(L2, at=NOW - DAY, head=sha("slow-pr"), pr=PR + 2, conclusion="timed_out")


def test_backend_page_shows_the_gate_adjusted_pass_rate_beside_the_raw_one(
    client, with_infra_failure
):
    response = client.get(f"/crcr/{L2}")
    body = text(response)
    adjusted = response.context["data"].adjusted

    assert adjusted.basis == "raw" and adjusted.windows
    window = adjusted.windows[0]
    assert window["adjusted"].n == window["raw"].n - 2  # the runner loss and broken trunk
    section = body.split('id="adjusted-pass-rate"', 1)[1].split("</div>", 1)[0]
    assert section.index('data-kind="raw"') < section.index('data-kind="adjusted"')
    excluded = section.split('id="adjusted-excluded"', 1)[1]
    assert "2 jobs excluded" in excluded and 'data-verdict="infra"' in excluded
    assert 'data-verdict="broken_downstream"' in excluded
    assert "runner_lost" in excluded and f'href="/crcr/commit/{sha("infra-pr")}"' in excluded
    assert sha("slow-pr") not in excluded
    assert body.index('id="gate-table"') < body.index('id="adjusted-pass-rate"')


def test_backend_page_links_the_failed_tests_drill_down(client, reviewed):
    body = text(client.get(f"/crcr/{L2}"))
    assert f'href="/crcr/{L2}/tests"' in body
    assert client.get(f"/crcr/{L2}/tests").status_code == 200


def test_only_maintainers_see_request_a_level_change(client, reviewed, django_user_model):
    from hud.models import BackendMaintainer, Downstream

    assert "Request a level change" not in text(client.get(f"/crcr/{L2}"))
    user = django_user_model.objects.create_user("maint", password="x")
    client.force_login(user)
    assert "Request a level change" not in text(client.get(f"/crcr/{L2}"))

    BackendMaintainer.objects.create(user=user, downstream=Downstream.objects.get(full_name=L2))
    body = text(client.get(f"/crcr/{L2}"))
    assert f'href="/crcr/{L2}/request"' in body and "Request a level change" in body
    assert "Request a level change" not in text(client.get(f"/crcr/{L4}"))


def test_backend_page_shows_an_active_override_where_the_level_is(client, reviewed):
    from hud import promotion
    from hud.models import Downstream, LevelOverride

    backend = Downstream.objects.get(full_name=L4)
    LevelOverride.objects.create(
        downstream=backend, level=Level.L2, reason="flaky runners", created_at=NOW - DAY,
        expires_at=NOW + 3 * DAY,
    )  # fmt: skip
    assert promotion.active_override(backend, NOW) is not None
    heading = text(client.get(f"/crcr/{L4}")).split("<h1>", 1)[1].split("</h1>", 1)[0]

    expires = (NOW + 3 * DAY).strftime("%Y-%m-%d %H:%M")
    assert '<span class="level" title="effective level">L2</span>' in heading
    iso = (NOW + 3 * DAY).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert f'held at L2 until <time datetime="{iso}"' in heading
    assert f">{expires} UTC</time>" in heading and "allowlist: L4" in heading
