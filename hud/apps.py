"""The domain app: owns every model and service."""

from typing import Any

from django.apps import AppConfig
from django.db.backends.signals import connection_created


def _custom_plans(sender: Any, connection: Any, **kwargs: Any) -> None:
    """On PostgreSQL with prepared statements, plan every execution for its own parameters.

    A statement psycopg has prepared (after five runs) gets PostgreSQL's generic plan after
    five more, one plan for any window and any set of backends: the summary, metrics and
    backends reads then took 1.4-1.9x as long (docs/performance.md). Parsing is still saved.
    """
    if connection.vendor != "postgresql":
        return
    if connection.settings_dict.get("OPTIONS", {}).get("prepare_threshold") is None:
        return  # nothing is prepared: every plan is a custom one already
    with connection.cursor() as cursor:
        cursor.execute("SET plan_cache_mode = force_custom_plan")


def _compiled_timestamps(sender: Any, connection: Any, **kwargs: Any) -> None:
    """On PostgreSQL, decode `timestamptz` values with psycopg's compiled loader.

    Django's loader subclasses psycopg's pure-Python one to set each value's tzinfo: 2.7 µs a
    value, a quarter of a gate evaluation at 1M jobs (docs/performance.md). The compiled
    loader parses the same text and the value is the same instant with the same tzinfo, as
    Django's would be.
    """
    if connection.vendor != "postgresql":
        return
    from psycopg import _cmodule
    from psycopg.adapt import Loader

    if _cmodule._psycopg is None:
        return  # the pure-Python psycopg: Django's loader is as fast as any
    compiled = _cmodule._psycopg.TimestamptzLoader
    timezone = connection.timezone

    class CompiledTzLoader(Loader):
        # What Django's cursors compare before registering their own loader.
        timezone = connection.timezone

        def __init__(self, oid: int, context: Any = None) -> None:
            super().__init__(oid, context)
            self._load = compiled(oid, context).load
            if self._load(b"2000-01-01 00:00:00+00").tzinfo is timezone:
                # The session's time zone is Django's (UTC, as Django sets it): the compiled
                # loader's values carry the same tzinfo, so psycopg calls it directly.
                self.load = self._load  # type: ignore[method-assign]

        def load(self, data: Any) -> Any:
            # The same instant in Django's zone (a replace() would relabel the session's
            # local time as UTC).
            return self._load(data).astimezone(timezone)

    connection.connection.adapters.register_loader("timestamptz", CompiledTzLoader)


class HudConfig(AppConfig):
    """CRCR HUD domain."""

    name = "hud"
    verbose_name = "CRCR HUD"

    def ready(self) -> None:
        """Register the Celery tasks, so hud.core.taskqueue finds each by its stable name, the
        signals that keep backends' revisions (hud.promotion.snapshot), and the planning mode
        and timestamp decoding of every new database connection."""
        from hud import tasks  # noqa: F401
        from hud.promotion import snapshot

        snapshot.connect_signals()
        connection_created.connect(_custom_plans, dispatch_uid="crcr-custom-plans")
        connection_created.connect(_compiled_timestamps, dispatch_uid="crcr-compiled-timestamps")
