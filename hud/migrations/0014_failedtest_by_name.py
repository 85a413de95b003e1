"""Failed tests found by name, and the planner told how many jobs have any.

The index on (classname, name) becomes one on (name, classname): attribution's cross-commit
read looks a judged job's tests up by name (`hud.attribution.evidence._cross_commit_rows`), and
without a leading `name` PostgreSQL scanned every failed test (26 ms → 1 ms on the heavy bench).
`job_id`'s statistics target goes to 1,000: with a few jobs reporting hundreds of tests, the
default sample put ~30 rows behind every job, so a backend's ranked failed tests hashed the whole
table instead of probing its window's jobs (24 ms → 1 ms). Plain `CREATE INDEX` (writes to
`hud_failedtest` wait for it; docs/operations.md).
"""

from django.db import migrations, models

STATISTICS = "ALTER TABLE hud_failedtest ALTER COLUMN job_id SET STATISTICS {}"


def _statistics(target: int):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        schema_editor.execute(STATISTICS.format(target))
        schema_editor.execute("ANALYZE hud_failedtest")

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("hud", "0013_logicaljob_series_tie_break"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="failedtest",
            index=models.Index(fields=["name", "classname"], name="failedtest_test"),
        ),
        migrations.RemoveIndex(
            model_name="failedtest",
            name="failedtest_id",
        ),
        migrations.RunPython(_statistics(1000), _statistics(-1)),
    ]
