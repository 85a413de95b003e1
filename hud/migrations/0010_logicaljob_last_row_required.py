from django.db import migrations, models


class Migration(migrations.Migration):
    # Its own migration: on PostgreSQL the fill's deferred foreign-key checks are still pending
    # in 0009's transaction, where ALTER TABLE is refused.
    dependencies = [
        ("hud", "0009_logicaljob_flakiness_and_last_row"),
    ]

    operations = [
        migrations.AlterField(
            model_name="logicaljob",
            name="last_placed_at",
            field=models.DateTimeField(),
        ),
        migrations.AddIndex(
            model_name="logicaljob",
            index=models.Index(
                fields=["downstream", "last_placed_at"], name="logicaljob_downstream_last"
            ),
        ),
    ]
