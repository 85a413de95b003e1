"""Property: every field of a callback, forward or webhook body mutated into an odd value gets
a 4xx naming a field, or is stored exactly as sent; afterwards no read answers 5xx.

Odd values: integers around and beyond the 32- and 64-bit edges, NaN and ±Infinity, huge
literals, text with NUL, control characters and lone surrogates, nesting up to 900 deep,
times outside datetime's range and offsets at its edges. A crawl of every HUD page and API
route with odd query values must find no 5xx either.

The bounded runs are part of the normal suite; the `fuzz` runs (`make reliability`) take
CRCR_FUZZ_EXAMPLES examples per body kind (default 500).
"""

import copy
import decimal
import itertools
import json
import os
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hud.core.payload import MAX_MESSAGE_BYTES, cut_utf8
from hud.models import Delivery, FailedTest, Job, Level
from tests.relay.conftest import SECRET, UPSTREAM, fixture_body, post_webhook
from tests.support import builders

REPO = "org/repo"
KEY = "k"
BOUNDED_EXAMPLES = 40
FUZZ_EXAMPLES = int(os.environ.get("CRCR_FUZZ_EXAMPLES", "500"))
_unique = itertools.count(1)

CALLBACK_FIELDS = [
    ("delivery_id",),
    ("event_type",),
    ("payload",),
    ("payload", "pull_request", "number"),
    ("payload", "pull_request", "title"),
    ("payload", "pull_request", "head", "sha"),
    ("payload", "pull_request", "labels"),
    ("workflow",),
    ("workflow", "schema_version"),
    ("workflow", "status"),
    ("workflow", "conclusion"),
    ("workflow", "name"),
    ("workflow", "url"),
    ("workflow", "run_id"),
    ("workflow", "run_attempt"),
    ("workflow", "job_name"),
    ("workflow", "check_run_id"),
    ("workflow", "started_at"),
    ("workflow", "completed_at"),
    ("workflow", "test_results"),
    ("workflow", "test_results", "passed"),
    ("workflow", "test_results", "total"),
    ("workflow", "failed_tests"),
    ("workflow", "failed_tests", 0, "name"),
    ("workflow", "failed_tests", 0, "classname"),
    ("workflow", "failed_tests", 0, "message"),
    ("workflow", "failed_tests", 0, "duration"),
    ("workflow", "artifact_url"),
    ("workflow", "environment"),
    ("workflow", "environment", "os"),
    ("workflow", "triage_verdict"),
    ("workflow", "triage_verdict", "summary"),
    ("workflow", "triage_verdict", "suspected_upstream", "pr"),
]
FORWARD_FIELDS = [
    ("trusted", "ci_metrics", "queue_time"),
    ("trusted", "ci_metrics", "execution_time"),
    ("trusted", "verified_repo"),
    ("trusted", "downstream_repo_level"),
    *[("untrusted", "callback_payload", *path) for path in CALLBACK_FIELDS],
]
WEBHOOK_FIELDS = [
    ("action",),
    ("number",),
    ("pull_request", "number"),
    ("pull_request", "title"),
    ("pull_request", "head", "sha"),
    ("pull_request", "base", "ref"),
    ("pull_request", "labels"),
    ("repository", "full_name"),
    ("sender", "login"),
]
# Where an accepted value lands: (path suffix, how to read it back from the stored job).
STORED_AS_SENT = {
    ("workflow", "job_name"): lambda job: job.job_name,
    ("workflow", "name"): lambda job: job.workflow_name,
    ("workflow", "environment"): lambda job: job.environment,
    ("workflow", "environment", "os"): lambda job: job.environment["os"],
    ("workflow", "failed_tests", 0, "name"): lambda job: FailedTest.objects.get(job=job).name,
    ("workflow", "failed_tests", 0, "message"): lambda job: FailedTest.objects.get(job=job).message,
    ("workflow", "failed_tests", 0, "duration"): lambda job: FailedTest.objects.get(
        job=job
    ).duration,
    ("payload", "pull_request", "number"): lambda job: job.pr_number,
    ("workflow", "test_results", "passed"): lambda job: job.tests_passed,
}

odd_text = st.text(st.characters(exclude_categories=()), max_size=12)
odd_numbers = st.one_of(
    st.sampled_from([0, -1, 2**31 - 1, 2**31, 2**32 + 1, 2**63 - 1, 2**63, -(2**63), 10**4000]),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
)
odd_times = st.one_of(
    st.sampled_from(
        [
            "0001-01-01T00:00:00+01:00",
            "9999-12-31T23:59:59-01:00",
            "2000-01-01T00:00:00Z",
            "1970-01-01T00:00:00Z",
            "2026-11-02T12:00:00+23:59",
            "2026-11-02",
            "2026-13-45T99:00:00Z",
        ]
    ),
    st.datetimes(timezones=st.timezones()).map(lambda moment: moment.isoformat()),
)
deep = st.integers(min_value=1, max_value=900).map(
    lambda depth: json.loads("[" * depth + "]" * depth)
)
odd_values = st.one_of(
    odd_text,
    odd_numbers,
    odd_times,
    deep,
    st.none(),
    st.booleans(),
    st.lists(odd_numbers, max_size=3),
    st.dictionaries(odd_text, odd_text, max_size=2),
    odd_numbers.map(str),
)


def mutated(body: dict, path: tuple, value: Any) -> dict:
    """A copy of `body` with the field at `path` set to `value` (containers made on the way)."""
    body = copy.deepcopy(body)
    container: Any = body
    for key in path[:-1]:
        if isinstance(container, dict):
            container = container.setdefault(key, {} if not isinstance(key, int) else [])
        elif isinstance(container, list) and isinstance(key, int) and key < len(container):
            container = container[key]
        else:
            return body
        if not isinstance(container, (dict, list)):
            return body
    last = path[-1]
    if isinstance(container, dict) or (
        isinstance(container, list) and isinstance(last, int) and last < len(container)
    ):
        container[last] = value
    return body


def callback_body() -> dict:
    """A legitimate completed callback with every optional part, unique per example."""
    number = next(_unique)
    body = builders.callback_body(
        REPO,
        status="completed",
        conclusion="failure",
        delivery_id=f"odd-{number}",
        check_run_id=f"odd-{number}",
        test_results={"passed": 10, "failed": 1, "skipped": 0, "total": 11},
        failed_tests=[{"name": "test_a", "classname": "T", "message": "m", "duration": 1.5}],
        artifact_url="https://example.org/artifact",
        environment={"os": "linux"},
        triage_verdict={
            "category": "upstream",
            "confidence": "low",
            "summary": "s",
            "suspected_upstream": {"pr": 1},
        },
    )
    return body


def same_json(stored: Any, sent: Any) -> bool:
    """Equal as JSON values. PostgreSQL's jsonb keeps a number as its decimal value, so a float
    sent as 1.801439850948199e+16 reads back as the int 18014398509481990: the same number."""
    if isinstance(sent, dict) and isinstance(stored, dict):
        return stored.keys() == sent.keys() and all(same_json(stored[k], sent[k]) for k in sent)
    if isinstance(sent, list) and isinstance(stored, list):
        return len(stored) == len(sent) and all(map(same_json, stored, sent))
    numbers = (int, float)
    if isinstance(sent, numbers) and isinstance(stored, numbers):
        if isinstance(sent, bool) or isinstance(stored, bool):
            return stored is sent
        return decimal.Decimal(repr(stored)) == decimal.Decimal(repr(sent))
    return stored == sent


def check_answer(response, path: tuple, value: Any, suffix: tuple) -> None:
    """A 4xx naming a field, or (when a job was created) the value stored exactly as sent."""
    assert response.status_code < 500, (path, value, response.content[:300])
    answer = response.json()
    if response.status_code >= 400:
        assert answer["field"], (path, value, answer)
        return
    read_back = STORED_AS_SENT.get(suffix)
    if answer.get("status") != "created" or read_back is None:
        return
    stored = read_back(Job.objects.get(pk=answer["job"]))
    if value is None and stored in (None, "", 0):
        return  # null is "not given": the column keeps its empty value
    if suffix == ("workflow", "test_results", "passed"):
        value = None if value in (None, "") else int(value)  # digits as text or a number
    if suffix == ("workflow", "failed_tests", 0, "duration") and value is not None:
        value = float(value)
    if suffix == ("workflow", "failed_tests", 0, "message") and isinstance(value, str):
        value = cut_utf8(value, MAX_MESSAGE_BYTES)  # the documented cap on a message
    assert same_json(stored, value), (path, value, stored)


def reads_answer_below_500(client: Client) -> list[str]:
    """Every read of what was stored: PRs, commits, the backend, its tests, the summaries."""
    urls = ["/crcr", f"/crcr/{REPO}", f"/crcr/{REPO}/tests", "/crcr/metrics", "/crcr/admin"]
    urls += ["/api/v1/backends/", f"/api/v1/backends/{REPO}/", "/api/v1/jobs"]
    urls += ["/api/v1/metrics/daily", f"/api/v1/backends/{REPO}/gates", "/api/v1/failed-tests"]
    for number in set(Job.objects.values_list("pr_number", flat=True)):
        urls += [f"/crcr/pr/{number}", f"/api/v1/prs/{number}"]
    for sha in set(Job.objects.values_list("head_sha", flat=True)):
        urls += [f"/crcr/commit/{sha}", f"/api/v1/commits/{sha}", f"/api/v1/gate/{sha}"]
    for name in set(FailedTest.objects.values_list("name", flat=True)):
        urls.append(f"/crcr/{REPO}/tests/{name}")
    return [f"{url} → {status}" for url in urls if (status := client.get(url).status_code) >= 500]


def _property_settings(examples: int):
    return settings(
        max_examples=examples,
        # The bounded run is the same every time; the fuzz run explores.
        derandomize=examples <= BOUNDED_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


def run_callbacks(client: Client, oidc, examples: int) -> None:
    """Post mutated callbacks; check each answer, then every read."""

    @_property_settings(examples)
    @given(path=st.sampled_from(CALLBACK_FIELDS), value=odd_values)
    def post(path: tuple, value: Any) -> None:
        raw = json.dumps(mutated(callback_body(), path, value)).encode()
        response = client.post(
            "/github/callback", raw, content_type="application/json", **oidc.headers(REPO)
        )
        check_answer(response, path, value, path)

    post()
    assert reads_answer_below_500(client) == []


def run_forwards(client: Client, examples: int) -> None:
    """Post mutated relay forwards; check each answer, then every read."""

    @_property_settings(examples)
    @given(path=st.sampled_from(FORWARD_FIELDS), value=odd_values)
    def post(path: tuple, value: Any) -> None:
        body = mutated(builders.forward_body(callback_body(), repo=REPO), path, value)
        response = client.post(
            "/api/crcr/results",
            json.dumps(body),
            content_type="application/json",
            HTTP_X_HUD_INTERNAL_BOT=KEY,
        )
        check_answer(response, path, value, path[2:])

    post()
    assert reads_answer_below_500(client) == []


def run_webhooks(client: Client, examples: int) -> None:
    """Post mutated, correctly signed upstream webhooks; check each answer and what is stored."""
    template = fixture_body("pull_request.opened")

    @_property_settings(examples)
    @given(path=st.sampled_from(WEBHOOK_FIELDS), value=odd_values)
    def post(path: tuple, value: Any) -> None:
        body = mutated(template, path, value)
        body["pull_request"]["id"] = next(_unique)  # distinct bodies, not redeliveries
        response = post_webhook(client, "pull_request", body)
        assert response.status_code < 500, (path, value, response.content[:300])
        answer = response.json()
        if response.status_code >= 400:
            assert answer["field"], (path, value, answer)
        elif answer.get("delivery") and answer["status"] != "duplicate":
            stored = Delivery.objects.get(delivery_id=answer["delivery"]).payload
            assert same_json(stored, body), (path, value)

    post()
    numbers = set(Delivery.objects.values_list("pr_number", flat=True))
    errors = [n for n in numbers if client.get(f"/crcr/pr/{n}").status_code >= 500]
    assert errors == []


@pytest.fixture
def odd_setup(settings, oidc, frozen_clock, db):
    """An L2 backend and limits that let every example through admission."""
    settings.HUD_BOT_KEY = KEY
    settings.CRCR_RATE_LIMIT_PER_MIN = 1_000_000
    # Webhooks are verified and stored; their fan-out waits for a commit that never comes.
    settings.GITHUB_WEBHOOK_SECRET = SECRET
    settings.CRCR_UPSTREAM_REPO = UPSTREAM
    builders.downstream(REPO, Level.L2)
    return oidc


def test_odd_callback_fields_are_refused_by_name_or_stored_as_sent(client, odd_setup):
    run_callbacks(client, odd_setup, BOUNDED_EXAMPLES)


def test_odd_forward_fields_are_refused_by_name_or_stored_as_sent(client, odd_setup):
    run_forwards(client, BOUNDED_EXAMPLES)


def test_odd_webhook_fields_are_refused_by_name_or_stored_as_sent(client, odd_setup):
    run_webhooks(client, BOUNDED_EXAMPLES)


@pytest.mark.fuzz
def test_fuzz_odd_bodies_of_every_kind(client, odd_setup):
    run_callbacks(client, odd_setup, FUZZ_EXAMPLES)
    run_forwards(client, FUZZ_EXAMPLES)
    run_webhooks(client, FUZZ_EXAMPLES)


# --- A crawl of every GET route with odd query values ------------------------------------

ODD_QUERY_VALUES = ["²", "-1", "9" * 30, "NaN", "9999-12-31", "0001-01-01T00:00:00+01:00"]
ODD_QUERY_VALUES += ["a\nb", "x/<script>", "%", "", "\u202e", "1e999", "org/repo"]
QUERY_NAMES = ["days", "page", "nightly_page", "pr", "job", "job_name", "conclusion"]
QUERY_NAMES += ["event_type", "since", "until", "as_of", "backend", "tab", "q", "downstream"]
QUERY_NAMES += ["sha", "limit", "format", "status", "test", "next"]
PATH_VALUES = {
    "org": "org",
    "repo": "repo",
    "number": "1234",
    "sha": builders.HEAD_SHA,
    "test": "T::test_a",
    "delivery_id": "delivery-1",
}


def route_templates() -> list[str]:
    """Every URL pattern of the site as a path with its parameters filled in."""
    found: list[str] = []

    def walk(patterns, prefix: str) -> None:
        for pattern in patterns:
            route = str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, prefix + route)
            elif isinstance(pattern, URLPattern):
                found.append(prefix + route)

    walk(get_resolver().url_patterns, "")
    paths = []
    for route in found:
        if "^" in route or "(?P" in route or route.startswith("django-admin"):
            continue  # regex routes (admin internals, static) are Django's own
        for name, value in PATH_VALUES.items():
            route = route.replace(f"<str:{name}>", value).replace(f"<{name}>", value)
            route = route.replace(f"<pr:{name}>", value).replace(f"<test_id:{name}>", value)
            route = route.replace(f"<int:{name}>", value).replace(f"<path:{name}>", value)
        if "<" not in route:
            paths.append("/" + route)
    return sorted(set(paths))


def crawl(
    client: Client, values: list[str], *, one_at_a_time: bool, prefix: str = "/"
) -> tuple[int, list[str]]:
    """GET every route bare and with odd query values; the 5xx found.

    `one_at_a_time`: each value in each parameter alone (the fuzz run); otherwise each value
    in every parameter at once (the bounded run: one request per route and value). `prefix`
    limits the crawl to the routes under it.
    """
    if one_at_a_time:
        queries = [{name: value} for name in QUERY_NAMES for value in values]
    else:
        queries = [dict.fromkeys(QUERY_NAMES, value) for value in values]
    requests, errors = 0, []
    for path in [route for route in route_templates() if route.startswith(prefix)]:
        for query in [{}, *queries]:
            requests += 1
            status = client.get(path, query).status_code
            if status >= 500:
                errors.append(f"{path} {query} → {status}")
    return requests, errors


@pytest.fixture
def stored_history(client, odd_setup):
    """One delivery, its dispatch and a failed job, so every route has rows to show."""
    backend = builders.Downstream.objects.get(full_name=REPO)
    builders.dispatch(builders.delivery(), backend)
    body = builders.callback_body(
        REPO, status="completed", conclusion="failure", failed_tests=[{"name": "test_a"}]
    )
    response = client.post(
        "/github/callback",
        json.dumps(body),
        content_type="application/json",
        **odd_setup.headers(REPO),
    )
    assert response.status_code == 200


def test_crawl_of_every_route_with_odd_query_values_finds_no_server_error(client, stored_history):
    requests, errors = crawl(client, ODD_QUERY_VALUES, one_at_a_time=False)
    print(f"crawl: {len(route_templates())} routes, {requests} requests, {len(errors)} 5xx")
    assert requests > 300
    assert errors == []


def test_crawl_of_the_admin_pages_signed_in_finds_no_server_error(client, stored_history):
    admin = get_user_model().objects.create_superuser("crawl-admin", password="x")
    client.force_login(admin)
    assert client.get("/crcr/admin").status_code == 200  # signed in, not redirected
    requests, errors = crawl(client, ODD_QUERY_VALUES, one_at_a_time=False, prefix="/crcr/admin")
    assert requests >= 5 * (1 + len(ODD_QUERY_VALUES))
    assert errors == []


@pytest.mark.fuzz
@pytest.mark.timeout(3600)  # 18,358 requests: about 30 min on a loaded 2-core machine
def test_fuzz_crawl_of_every_route_with_every_odd_query_value(client, stored_history):
    requests, errors = crawl(client, ODD_QUERY_VALUES, one_at_a_time=True)
    print(f"crawl: {requests} requests, {len(errors)} 5xx")
    assert errors == []
