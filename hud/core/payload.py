"""Validation of a callback body (CRCR.md, "Callback" and "Body fields").

A pure function, so the HTTP endpoint, the relay forward, `import_results` and the
no-framework floor benchmark all validate with exactly the same code. Every rejection names
the dotted path of the offending field.
"""

import datetime as dt
import json
import re
from dataclasses import dataclass, field
from typing import Any

from hud.core import inputs
from hud.core.inputs import PayloadError

# check_webhook is re-exported for the callers that import it from here (api.webhook).
from hud.core.webhook import check_webhook as check_webhook
from hud.core.webhook import upstream_context

MAX_FAILED_TESTS = 1000
MAX_MESSAGE_BYTES = 1024
MAX_STACKTRACE_BYTES = 4096
MAX_NAME_CHARS = 255
MAX_TEST_NAME_CHARS = 500
MAX_ENVIRONMENT_BYTES = 64 * 1024
MAX_VERDICT_SUMMARY_BYTES = 1024
MAX_VERDICT_EVIDENCE = 10
MAX_VERDICT_EXCERPT_BYTES = 1024
MAX_VERDICT_BYTES = 16 * 1024

STATUSES = ("in_progress", "completed")
CONCLUSIONS = ("success", "failure", "cancelled", "timed_out", "skipped", "neutral")
EVENT_TYPES = ("pull_request", "push", "nightly", "periodic")
VERDICT_CATEGORIES = ("upstream", "backend", "infra", "flake", "unknown")
VERDICT_CONFIDENCES = ("high", "medium", "low")
TEST_COUNT_KEYS = ("passed", "failed", "skipped", "total")

_DIGITS = re.compile(r"^[0-9]{1,18}$")
_SHA = re.compile(r"^[0-9a-fA-F]{7,64}$")
_CONTROL = re.compile("[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class FailedTestData:
    """One failed test as stored (already capped)."""

    name: str
    classname: str
    message: str
    stacktrace: str
    duration: float | None


@dataclass(frozen=True)
class CallbackData:
    """A validated callback body with the upstream context it claims."""

    delivery_id: str
    event_type: str
    status: str
    conclusion: str
    workflow_name: str
    workflow_url: str
    run_id: int
    run_attempt: int
    job_name: str
    check_run_id: str
    started_at: dt.datetime | None
    completed_at: dt.datetime | None
    head_sha: str
    head_sha_field: str | None
    pr_number: int
    pr_title: str
    ref: str
    labels: tuple[str, ...]
    tests: dict[str, int | None]
    failed_tests: tuple[FailedTestData, ...] = ()
    failed_tests_truncated: bool = False
    artifact_url: str = ""
    environment: dict | None = None
    triage_verdict: dict | None = None
    verdict_dropped: str = ""
    raw_payload: dict = field(default_factory=dict)


def decode_json(raw: bytes) -> Any:
    """Decode a request body as UTF-8 JSON whose every value is storable as sent."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PayloadError(
            f"body is not valid UTF-8 (byte {exc.start})", None, "invalid_json"
        ) from exc
    return inputs.loads(text)


def _identity_text(value: str, path: str) -> str:
    """A name that becomes part of a job's identity, a check-run name and URLs: one line."""
    if _CONTROL.search(value):
        raise PayloadError(f"{path} must not contain control characters (e.g. newlines)", path)
    return value


def cut_utf8(value: str, limit: int) -> str:
    """Cut a string to at most `limit` UTF-8 bytes without splitting a character."""
    encoded = value.encode("utf-8")
    if len(encoded) <= limit:
        return value
    return encoded[:limit].decode("utf-8", errors="ignore")


def _object(value: Any, path: str, *, required: bool = True) -> dict:
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise PayloadError(f"{path} must be a JSON object", path)
    return value


def _string(
    container: dict,
    key: str,
    path: str,
    *,
    required: bool = False,
    max_chars: int | None = None,
    default: str = "",
) -> str:
    value = container.get(key)
    if value is None or value == "":
        if required:
            raise PayloadError(f"{path} is required", path, "missing_field")
        return default
    if not isinstance(value, str):
        raise PayloadError(f"{path} must be a string", path)
    if max_chars is not None and len(value) > max_chars:
        raise PayloadError(f"{path} is longer than {max_chars} characters", path)
    return value


def _digits(
    container: dict, key: str, path: str, *, required: bool, default: int | None = None
) -> int | None:
    value = container.get(key)
    if value is None or value == "":
        if required:
            raise PayloadError(f"{path} is required", path, "missing_field")
        return default
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise PayloadError(f"{path} must be digits (a string or a number)", path)
    text = str(value)
    if not _DIGITS.match(text):
        raise PayloadError(f"{path} must be digits (a string or a number), got {text[:40]!r}", path)
    return int(text)


def _timestamp(container: dict, key: str, path: str) -> dt.datetime | None:
    value = container.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise PayloadError(f"{path} must be an ISO 8601 time or null", path)
    return inputs.aware_time(value, path)


def _http_url(container: dict, key: str, path: str) -> str:
    value = _string(container, key, path, max_chars=500)
    if value and not re.match(r"^https?://[^\s/]+(/\S*)?$", value):
        raise PayloadError(f"{path} must be an http(s) URL", path)
    return value


def workflow_url_pattern(repo: str) -> re.Pattern[str]:
    """The only `workflow.url` accepted for a GitHub-issued token of `repo`."""
    return re.compile(
        rf"^https://github\.com/{re.escape(repo)}/actions/runs/(\d+)"
        r"(/attempts/\d+)?/?$",
        re.IGNORECASE,
    )


def _tests(workflow: dict) -> dict[str, int | None]:
    results = _object(workflow.get("test_results"), "workflow.test_results", required=False)
    counts: dict[str, int | None] = {}
    for key in TEST_COUNT_KEYS:
        counts[key] = _digits(results, key, f"workflow.test_results.{key}", required=False)
    return counts


def _failed_tests(workflow: dict) -> tuple[tuple[FailedTestData, ...], bool]:
    items = workflow.get("failed_tests")
    if items is None:
        return (), False
    if not isinstance(items, list):
        raise PayloadError("workflow.failed_tests must be a list", "workflow.failed_tests")
    truncated = len(items) > MAX_FAILED_TESTS
    kept = []
    for index, item in enumerate(items[:MAX_FAILED_TESTS]):
        path = f"workflow.failed_tests[{index}]"
        item = _object(item, path)
        duration = inputs.seconds(item.get("duration"), f"{path}.duration")
        kept.append(
            FailedTestData(
                name=_string(
                    item, "name", f"{path}.name", required=True, max_chars=MAX_TEST_NAME_CHARS
                ),
                classname=_string(
                    item, "classname", f"{path}.classname", max_chars=MAX_TEST_NAME_CHARS
                ),
                message=cut_utf8(_string(item, "message", f"{path}.message"), MAX_MESSAGE_BYTES),
                stacktrace=cut_utf8(
                    _string(item, "stacktrace", f"{path}.stacktrace"), MAX_STACKTRACE_BYTES
                ),
                duration=duration,
            )
        )
    return tuple(kept), truncated


def _suspected_upstream(suspected: dict) -> tuple[dict, str]:
    """(the kept pr, commit and reason of a verdict's suspect, why_dropped)."""
    kept = {}
    for key in ("pr", "commit", "reason"):
        item = suspected.get(key)
        if item is None:
            continue
        if key == "pr" and not (isinstance(item, int) and not isinstance(item, bool)):
            if not (isinstance(item, str) and item.isdigit()):
                return {}, "triage_verdict.suspected_upstream.pr is not a number"
            item = int(item)
        elif key != "pr":
            if not isinstance(item, str):
                return {}, f"triage_verdict.suspected_upstream.{key} is not a string"
            item = cut_utf8(item, MAX_VERDICT_EXCERPT_BYTES)
        kept[key] = item
    return kept, ""


def _evidence(evidence: Any) -> tuple[list, str]:
    """(a verdict's first evidence items, excerpts cut, why_dropped)."""
    if not isinstance(evidence, list):
        return [], "triage_verdict.evidence is not a list"
    items = []
    for item in evidence[:MAX_VERDICT_EVIDENCE]:
        if isinstance(item, str):
            items.append(cut_utf8(item, MAX_VERDICT_EXCERPT_BYTES))
        elif isinstance(item, dict):
            items.append(
                {
                    str(k)[:64]: cut_utf8(v, MAX_VERDICT_EXCERPT_BYTES) if isinstance(v, str) else v
                    for k, v in item.items()
                    if isinstance(v, (str, int, float, bool)) or v is None
                }
            )
        else:
            return [], "triage_verdict.evidence items must be strings or objects"
    return items, ""


def normalise_verdict(value: Any) -> tuple[dict | None, str]:
    """Return (verdict, why_dropped): over-long text is cut, a structural fault drops it whole."""
    if value is None:
        return None, ""
    if not isinstance(value, dict):
        return None, "triage_verdict is not an object"
    if str(value.get("schema_version", "1")) != "1":
        return None, "triage_verdict.schema_version is not 1"
    category, confidence = value.get("category"), value.get("confidence")
    if category not in VERDICT_CATEGORIES:
        return None, "triage_verdict.category is not one of " + ", ".join(VERDICT_CATEGORIES)
    if confidence not in VERDICT_CONFIDENCES:
        return None, "triage_verdict.confidence is not one of high, medium, low"
    summary = value.get("summary", "")
    if not isinstance(summary, str):
        return None, "triage_verdict.summary is not a string"
    verdict: dict[str, Any] = {
        "schema_version": "1",
        "category": category,
        "confidence": confidence,
        "summary": cut_utf8(summary, MAX_VERDICT_SUMMARY_BYTES),
    }
    suspected = value.get("suspected_upstream")
    if suspected is not None:
        if category != "upstream" or not isinstance(suspected, dict):
            return None, "triage_verdict.suspected_upstream needs category upstream"
        kept, dropped = _suspected_upstream(suspected)
        if dropped:
            return None, dropped
        verdict["suspected_upstream"] = kept
    evidence = value.get("evidence")
    if evidence is not None:
        items, dropped = _evidence(evidence)
        if dropped:
            return None, dropped
        verdict["evidence"] = items
    retry = value.get("reproduced_on_retry")
    if retry is not None:
        if not isinstance(retry, bool):
            return None, "triage_verdict.reproduced_on_retry is not a boolean"
        verdict["reproduced_on_retry"] = retry
    for key in ("analyzer", "analyzed_at"):
        item = value.get(key)
        if item is not None:
            if not isinstance(item, str):
                return None, f"triage_verdict.{key} is not a string"
            verdict[key] = cut_utf8(item, 200)
    if len(json.dumps(verdict).encode()) > MAX_VERDICT_BYTES:
        while verdict.get("evidence") and len(json.dumps(verdict).encode()) > MAX_VERDICT_BYTES:
            verdict["evidence"].pop()
    return verdict, ""


def _status(workflow: dict) -> tuple[str, str]:
    """(status, conclusion): a completed job must say how it ended."""
    status = _string(workflow, "status", "workflow.status", required=True)
    if status not in STATUSES:
        raise PayloadError("workflow.status must be in_progress or completed", "workflow.status")
    conclusion = ""
    if status == "completed":
        conclusion = _string(workflow, "conclusion", "workflow.conclusion", required=True)
        if conclusion not in CONCLUSIONS:
            raise PayloadError(
                "workflow.conclusion must be one of " + ", ".join(CONCLUSIONS),
                "workflow.conclusion",
            )
    return status, conclusion


def _event_type(body: dict, payload: dict) -> str:
    """The event type sent, or guessed from the payload when left out."""
    event_type = _string(body, "event_type", "event_type", max_chars=40)
    if not event_type:
        event_type = "pull_request" if "pull_request" in payload else "push"
    if event_type not in EVENT_TYPES:
        raise PayloadError("event_type must be one of " + ", ".join(EVENT_TYPES), "event_type")
    return event_type


def _run(workflow: dict, verified_repo: str, check_url: bool) -> tuple[int, int, str]:
    """(run id, run attempt, run URL); with `check_url` the URL must be this repo's run."""
    run_id = _digits(workflow, "run_id", "workflow.run_id", required=True)
    run_attempt = _digits(
        workflow, "run_attempt", "workflow.run_attempt", required=False, default=1
    )
    inputs.integer_in_range(run_attempt, "workflow.run_attempt", 1, inputs.INT32_MAX)
    url = _string(workflow, "url", "workflow.url", required=True, max_chars=500)
    if check_url:
        match = workflow_url_pattern(verified_repo).match(url)
        if not match:
            raise PayloadError(
                f"workflow.url must be https://github.com/{verified_repo}/actions/runs/<run_id>",
                "workflow.url",
            )
        if int(match.group(1)) != run_id:
            raise PayloadError(
                "workflow.url names another run than workflow.run_id", "workflow.url"
            )
    elif not re.match(r"^https://", url):
        raise PayloadError("workflow.url must be an https URL", "workflow.url")
    return run_id, run_attempt, url


def _check_run_id(workflow: dict) -> str:
    """The job's check run id as text (a number is accepted), "" when not sent."""
    check_run_id = workflow.get("check_run_id")
    if isinstance(check_run_id, int) and not isinstance(check_run_id, bool):
        check_run_id = str(check_run_id)
    return _identity_text(
        _string({"v": check_run_id}, "v", "workflow.check_run_id", max_chars=100),
        "workflow.check_run_id",
    )


def _environment(workflow: dict) -> dict | None:
    """The job's environment object, refused over 64 KB."""
    environment = workflow.get("environment")
    if environment is not None:
        environment = _object(environment, "workflow.environment")
        if len(json.dumps(environment).encode()) > MAX_ENVIRONMENT_BYTES:
            raise PayloadError("workflow.environment is larger than 64 KB", "workflow.environment")
    return environment


def _checked_context(
    delivery_id: str, payload: dict
) -> tuple[str, str | None, int, str, str, tuple[str, ...]]:
    """`upstream_context`, with a head SHA taken from the payload required to be hex."""
    context = upstream_context(delivery_id, payload)
    head_sha, sha_field = context[0], context[1]
    if sha_field and not _SHA.match(head_sha):
        raise PayloadError(f"{sha_field} must be a hex commit SHA", sha_field)
    return context


def _job_name(workflow: dict, key: str) -> str:
    """`workflow.name` or `workflow.job_name`: required, one line, at most 255 characters."""
    path = f"workflow.{key}"
    return _identity_text(
        _string(workflow, key, path, required=True, max_chars=MAX_NAME_CHARS), path
    )


def parse_callback(body: Any, verified_repo: str, *, check_url: bool = True) -> CallbackData:
    """Validate a callback body for `verified_repo`; raise PayloadError naming the field.

    The steps run in the order below, so a body with several faults is refused for the first.
    """
    body = _object(body, "body")
    delivery_id = _identity_text(
        _string(body, "delivery_id", "delivery_id", required=True, max_chars=100), "delivery_id"
    )
    payload = _object(body.get("payload"), "payload", required=False)
    workflow = _object(body.get("workflow"), "workflow")
    schema = workflow.get("schema_version", "1")
    if str(schema) != "1":
        raise PayloadError('workflow.schema_version must be "1"', "workflow.schema_version")

    status, conclusion = _status(workflow)
    event_type = _event_type(body, payload)
    run_id, run_attempt, url = _run(workflow, verified_repo, check_url)
    check_run_id = _check_run_id(workflow)
    environment = _environment(workflow)
    verdict, dropped = normalise_verdict(workflow.get("triage_verdict"))
    failed_tests, truncated = _failed_tests(workflow)
    head_sha, sha_field, pr_number, title, ref, labels = _checked_context(delivery_id, payload)

    return CallbackData(
        delivery_id=delivery_id,
        event_type=event_type,
        status=status,
        conclusion=conclusion,
        workflow_name=_job_name(workflow, "name"),
        workflow_url=url,
        run_id=run_id,
        run_attempt=run_attempt,
        job_name=_job_name(workflow, "job_name"),
        check_run_id=check_run_id or f"{run_id}-{run_attempt}",
        started_at=_timestamp(workflow, "started_at", "workflow.started_at"),
        completed_at=_timestamp(workflow, "completed_at", "workflow.completed_at"),
        head_sha=head_sha[:64],
        head_sha_field=sha_field,
        pr_number=pr_number,
        pr_title=title,
        ref=ref[:255],
        labels=labels,
        tests=_tests(workflow),
        failed_tests=failed_tests,
        failed_tests_truncated=truncated,
        artifact_url=_http_url(workflow, "artifact_url", "workflow.artifact_url"),
        environment=environment,
        triage_verdict=verdict,
        verdict_dropped=dropped,
        raw_payload=payload,
    )
