from django.db import migrations, models


class Migration(migrations.Migration):
    # A column with a constant default: PostgreSQL adds it without rewriting the table. Rows
    # kept before it start at 0, as rows a rebuild inserts (the database's default); the next
    # write that changes one makes it 1.
    dependencies = [
        ("hud", "0010_logicaljob_last_row_required"),
    ]

    operations = [
        migrations.AddField(
            model_name="dailyrollup",
            name="revision",
            field=models.IntegerField(db_default=0, default=0),
        ),
    ]
