"""An index of a backend's logical jobs by event type and moment.

The backend page's matrices read one backend's logical jobs of some event types (PR and push,
or nightly and periodic) in a window. Through the (downstream, placed_at) index the planner
preferred ANDing the backend's nightlies of all history (the key index) with every backend's
window (logicaljob_time): at 1M jobs the nightly matrix's rows took 2.1 ms, and grew with
history; through this index, 0.2 ms. A plain `CREATE INDEX`, as 0013 to 0015
(docs/operations.md): writes to `hud_logicaljob` wait for it (~1 s at 1M jobs).
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("hud", "0015_job_timed"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="logicaljob",
            index=models.Index(
                fields=["downstream", "event_type", "placed_at"], name="logicaljob_event_time"
            ),
        ),
    ]
