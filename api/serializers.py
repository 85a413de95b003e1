"""Output serializers with explicit fields: one per table, shared by JSON and CSV."""

from rest_framework import serializers

from hud.models import Downstream, FailedTest, Job


class FailedTestSerializer(serializers.ModelSerializer):
    """A failed test as reported (message ≤ 1 KB, stacktrace ≤ 4 KB)."""

    class Meta:
        model = FailedTest
        fields = ["classname", "name", "message", "stacktrace", "duration"]


class BlankAsNullField(serializers.CharField):
    """Text stored as "" for "not yet" (a conclusion while the job runs), shown as null."""

    def to_representation(self, value: str) -> str | None:
        """The text, or None when blank."""
        return value or None


class JobSerializer(serializers.ModelSerializer):
    """One attempt of one downstream job (a field per column: exports read them by path)."""

    downstream = serializers.CharField(source="downstream.full_name")
    level = serializers.CharField(source="downstream.get_level_display")
    conclusion = BlankAsNullField(read_only=True, allow_null=True)

    class Meta:
        model = Job
        fields = [
            "id",
            "downstream",
            "level",
            "event_type",
            "delivery_id",
            "pr_number",
            "head_sha",
            "workflow_name",
            "job_name",
            "check_run_id",
            "run_id",
            "run_attempt",
            "status",
            "conclusion",
            "closed_by_sweeper",
            "verified",
            "source",
            "workflow_url",
            "artifact_url",
            "placed_at",
            "reported_started_at",
            "reported_completed_at",
            "in_progress_received_at",
            "completed_received_at",
            "queue_seconds",
            "execution_seconds",
            "timing_source",
            "tests_passed",
            "tests_failed",
            "tests_skipped",
            "tests_total",
            "failed_tests_truncated",
            "triage_verdict",
        ]


class JobDetailSerializer(JobSerializer):
    """A job with its failed tests (PR and commit views)."""

    failed_tests = FailedTestSerializer(many=True, read_only=True)

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "failed_tests"]


class BackendSerializer(serializers.ModelSerializer):
    """A downstream backend with its level and last result."""

    level = serializers.CharField(source="get_level_display")
    last_result_at = serializers.DateTimeField(allow_null=True, read_only=True)
    url = serializers.SerializerMethodField()

    class Meta:
        model = Downstream
        fields = [
            "full_name",
            "level",
            "device",
            "oncalls",
            "delisted",
            "pending_upstream",
            "last_result_at",
            "url",
        ]

    def get_url(self, backend: Downstream) -> str:
        """The backend's page on this HUD."""
        return f"/crcr/{backend.full_name}"


def _stat(kind: type[serializers.Field] = serializers.FloatField) -> serializers.Field:
    return kind(read_only=True, allow_null=True)


class BackendStatsSerializer(BackendSerializer):
    """A backend with the `/crcr` figures of a window (one row of the summary table)."""

    window_days = _stat(serializers.IntegerField)
    effective_level = _stat(serializers.CharField)
    pass_rate = _stat()
    pass_rate_low = _stat()
    pass_rate_high = _stat()
    pass_rate_n = _stat(serializers.IntegerField)
    successes = _stat(serializers.IntegerField)
    failures = _stat(serializers.IntegerField)
    timed_out = _stat(serializers.IntegerField)
    cancelled = _stat(serializers.IntegerField)
    counted = _stat(serializers.IntegerField)
    execution_seconds_mean = _stat()
    execution_seconds_p50 = _stat()
    stuck_jobs = _stat(serializers.IntegerField)
    stale = _stat(serializers.BooleanField)

    class Meta(BackendSerializer.Meta):
        fields = [
            *BackendSerializer.Meta.fields,
            "window_days",
            "effective_level",
            "pass_rate",
            "pass_rate_low",
            "pass_rate_high",
            "pass_rate_n",
            "successes",
            "failures",
            "timed_out",
            "cancelled",
            "counted",
            "execution_seconds_mean",
            "execution_seconds_p50",
            "stuck_jobs",
            "stale",
        ]

    def to_representation(self, instance: Downstream) -> dict:
        """The model fields plus the figures the view attached as `instance.figures`."""
        data = super().to_representation(instance)
        figures = getattr(instance, "figures", None) or {}
        for name in BackendStatsSerializer.Meta.fields[len(BackendSerializer.Meta.fields) :]:
            data[name] = figures.get(name)
        return data


class BackendDetailSerializer(BackendStatsSerializer):
    """A backend as the list shows it (same fields, same values), plus every page figure."""

    stats = serializers.JSONField(read_only=True, help_text="hud.stats.backend_summary as JSON")

    class Meta(BackendStatsSerializer.Meta):
        fields = [*BackendStatsSerializer.Meta.fields, "stats"]


class DailyRowSerializer(serializers.Serializer):
    """One backend-day of `hud.stats.daily_series` (documentation of `/api/v1/metrics/daily`)."""

    downstream = serializers.CharField()
    day = serializers.DateField()
    pass_rate = serializers.FloatField(allow_null=True)
    low = serializers.FloatField(allow_null=True)
    high = serializers.FloatField(allow_null=True)
    n = serializers.IntegerField()
    sufficient = serializers.BooleanField()
    successes = serializers.IntegerField()
    failures = serializers.IntegerField()
    timed_out = serializers.IntegerField()
    runs = serializers.IntegerField()
    mean_execution_seconds = serializers.FloatField(allow_null=True)
    p50_execution_seconds = serializers.FloatField(allow_null=True)
    mean_end_to_end_seconds = serializers.FloatField(allow_null=True)
    p50_end_to_end_seconds = serializers.FloatField(allow_null=True)


class FailedTestRankSerializer(serializers.Serializer):
    """A failed test of a window ranked by occurrences, with its most recent message."""

    classname = serializers.CharField()
    name = serializers.CharField()
    occurrences = serializers.IntegerField()
    jobs = serializers.IntegerField()
    last_seen = serializers.DateTimeField()
    last_message = serializers.CharField()
    last_job_id = serializers.IntegerField()
    last_workflow_url = serializers.CharField()


class JobVerdictSerializer(JobDetailSerializer):
    """A job with failed tests and its logical job's verdict (context `verdicts`: by job id)."""

    verdict = serializers.SerializerMethodField()
    verdict_summary = serializers.SerializerMethodField()
    verdict_evidence = serializers.SerializerMethodField()
    advisory_triage_verdict = serializers.SerializerMethodField()

    class Meta(JobDetailSerializer.Meta):
        fields = [
            *JobDetailSerializer.Meta.fields,
            "verdict",
            "verdict_summary",
            "verdict_evidence",
            "advisory_triage_verdict",
        ]

    def _verdict(self, job: Job) -> dict | None:
        return self.context.get("verdicts", {}).get(job.id)

    def get_verdict(self, job: Job) -> str | None:
        """Our verdict on this job's logical job (hud.attribution); null when not judged."""
        item = self._verdict(job)
        return item["verdict"] if item else None

    def get_verdict_summary(self, job: Job) -> str:
        """The verdict's evidence in one sentence."""
        item = self._verdict(job)
        return item["summary"] if item else ""

    def get_verdict_evidence(self, job: Job) -> dict | None:
        """The evidence that produced the verdict."""
        item = self._verdict(job)
        return item["evidence"] if item else None

    def get_advisory_triage_verdict(self, job: Job) -> dict | None:
        """The backend's self-reported triage_verdict, labelled advisory; never ours."""
        verdict = job.triage_verdict
        if not isinstance(verdict, dict):
            return None
        return {"label": "advisory (self-reported by the backend)", **verdict}
