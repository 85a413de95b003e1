"""Output serializers with explicit fields: one per table, shared by JSON and CSV."""

from rest_framework import serializers

from hud.models import Downstream, FailedTest, Job


class FailedTestSerializer(serializers.ModelSerializer):
    """A failed test as reported (message ≤ 1 KB, stacktrace ≤ 4 KB)."""

    class Meta:
        model = FailedTest
        fields = ["classname", "name", "message", "stacktrace", "duration"]


class JobSerializer(serializers.ModelSerializer):
    """One attempt of one downstream job."""

    downstream = serializers.CharField(source="downstream.full_name")
    level = serializers.CharField(source="downstream.get_level_display")
    conclusion = serializers.SerializerMethodField()

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

    def get_conclusion(self, job: Job) -> str | None:
        """Null while the job is in progress."""
        return job.conclusion or None


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
