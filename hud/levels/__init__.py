"""Level history: allowlist import/export, the level in effect at a time, and levels learnt
from relay forwards (CRCR.md, "Our definitions" → "Levels").

The database holds the effective level; `LevelChange` is append-only history and may be
back-dated, so "30 days at L2" can be answered for imported history too.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime

from django.db import IntegrityError, connection, transaction
from django.db.models.functions import Lower

from hud.core import clock
from hud.core.allowlist import AllowlistEntry, parse_allowlist, render_allowlist
from hud.models import AllowlistImport, Downstream, Level, LevelChange, LevelOverride, sql


def _label(level: int | None) -> str:
    return "delisted" if level is None else f"L{level}"


@dataclass
class ImportReport:
    """What an allowlist import did (or would do, for a dry run)."""

    source: str
    effective_since: datetime
    dry_run: bool = False
    created: list[str] = field(default_factory=list)
    changed: list[dict] = field(default_factory=list)  # {"full_name", "from", "to"}
    delisted: list[str] = field(default_factory=list)
    relisted: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)  # device/on-calls/spelling only
    confirmed: list[str] = field(default_factory=list)  # pending approvals the file now agrees with
    conflicts: list[dict] = field(default_factory=list)  # {"full_name", "file", "approved"}
    unchanged: int = 0
    import_id: int | None = None

    @property
    def has_changes(self) -> bool:
        """Whether the import changed any downstream."""
        return bool(
            self.created
            or self.changed
            or self.delisted
            or self.relisted
            or self.updated
            or self.confirmed
        )

    def as_dict(self) -> dict:
        """JSON-ready form, stored on the AllowlistImport row."""
        data = asdict(self)
        data["effective_since"] = self.effective_since.isoformat()
        return data

    def lines(self) -> list[str]:
        """Readable lines for the management command."""
        head = "Dry run of allowlist import" if self.dry_run else "Imported allowlist"
        out = [f"{head} from {self.source} (effective {self.effective_since.isoformat()})"]
        out += [f"  created   {name}" for name in self.created]
        out += [f"  changed   {c['full_name']}: {c['from']} → {c['to']}" for c in self.changed]
        out += [f"  relisted  {name}" for name in self.relisted]
        out += [f"  delisted  {name}" for name in self.delisted]
        out += [f"  updated   {name}" for name in self.updated]
        out += [f"  confirmed {name} (approval now in the allowlist)" for name in self.confirmed]
        out += [
            f"  CONFLICT  {c['full_name']}: file says {c['file']}, approved {c['approved']}"
            " (pending upstream; not reverted)"
            for c in self.conflicts
        ]
        out.append(
            f"  {len(self.created)} created, {len(self.changed)} changed, "
            f"{len(self.relisted)} relisted, {len(self.delisted)} delisted, "
            f"{len(self.updated)} updated, {self.unchanged} unchanged, "
            f"{len(self.conflicts)} conflict(s)"
        )
        return out


def find_downstream(full_name: str) -> Downstream | None:
    """The downstream with this owner/repo (or an alias of it), case-insensitively, or None."""
    name = full_name.strip().lower()
    # Plain SQL: every callback asks (hud.models.sql).
    with connection.cursor() as cursor:
        cursor.execute(sql.FIND_DOWNSTREAM, [name])
        row = cursor.fetchone()
    if row is not None:
        return sql.instance(Downstream, sql.DOWNSTREAM_COLUMNS, row)
    # A renamed or transferred repository keeps its history through RepositoryAlias.
    return (
        Downstream.objects.alias(alias_lower=Lower("aliases__old_name"))
        .filter(alias_lower=name)
        .first()
    )


def level_at(downstream: Downstream, when: datetime) -> int | None:
    """The level in effect at `when` per history; None if delisted or before any history."""
    latest = (
        LevelChange.objects.filter(downstream=downstream, at__lte=when)
        .order_by("-at", "-id")
        .values_list("to_level", flat=True)
        .first()
    )
    return latest


def _record(
    downstream: Downstream,
    from_level: int | None,
    to_level: int | None,
    at: datetime,
    source: str,
    reason: str,
) -> LevelChange:
    return LevelChange.objects.create(
        downstream=downstream,
        from_level=from_level,
        to_level=to_level,
        at=at,
        recorded_at=clock.now(),
        source=source,
        reason=reason,
    )


def import_allowlist(
    text: str, source: str, since: datetime | None = None, dry_run: bool = False
) -> ImportReport:
    """Apply an allowlist file to the downstreams and their history, in one transaction."""
    # Parse before touching the database: a malformed file changes nothing.
    allowlist = parse_allowlist(text)
    now = clock.now()
    at = since or now
    report = ImportReport(source=source, effective_since=at, dry_run=dry_run)
    reason = f"allowlist import from {source}"

    with transaction.atomic():
        existing = {
            downstream.full_name.lower(): downstream
            for downstream in Downstream.objects.select_for_update()
        }
        for entry in allowlist.entries:
            downstream = existing.pop(entry.key, None)
            if downstream is None:
                downstream = Downstream.objects.create(
                    full_name=entry.full_name,
                    level=entry.level,
                    device=entry.device,
                    oncalls=list(entry.oncalls),
                    created_at=at,
                )
                _record(downstream, None, entry.level, at, LevelChange.Source.IMPORT, reason)
                report.created.append(entry.full_name)
                continue
            _apply_entry(downstream, entry, at, reason, report)

        for downstream in existing.values():
            if downstream.delisted:
                continue
            if downstream.pending_upstream:
                # Approved here, not in the file yet: the approval stands until the file agrees.
                report.conflicts.append(
                    {
                        "full_name": downstream.full_name,
                        "file": "absent",
                        "approved": _label(downstream.level),
                    }
                )
                continue
            downstream.delisted = True
            downstream.save(update_fields=["delisted"])
            _record(downstream, downstream.level, None, at, LevelChange.Source.IMPORT, reason)
            report.delisted.append(downstream.full_name)

        if dry_run:
            transaction.set_rollback(True)
        else:
            record = AllowlistImport.objects.create(
                text=text,
                sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
                source=source[:500],
                imported_at=now,
                effective_since=at,
                report={},
            )
            report.import_id = record.pk
            record.report = report.as_dict()
            record.save(update_fields=["report"])
    return report


def _apply_entry(
    downstream: Downstream, entry: AllowlistEntry, at: datetime, reason: str, report: ImportReport
) -> None:
    """Bring one existing downstream in line with its allowlist entry."""
    fields: list[str] = []
    level_differs = downstream.delisted or downstream.level != entry.level
    confirmed = False
    if downstream.pending_upstream:
        if level_differs:
            report.conflicts.append(
                {
                    "full_name": downstream.full_name,
                    "file": _label(entry.level),
                    "approved": _label(None if downstream.delisted else downstream.level),
                }
            )
            return
        downstream.pending_upstream = False
        fields.append("pending_upstream")
        report.confirmed.append(entry.full_name)
        confirmed = True

    if downstream.delisted:
        _record(downstream, None, entry.level, at, LevelChange.Source.IMPORT, reason)
        downstream.delisted = False
        downstream.level = entry.level
        fields += ["delisted", "level"]
        report.relisted.append(entry.full_name)
    elif downstream.level != entry.level:
        _record(downstream, downstream.level, entry.level, at, LevelChange.Source.IMPORT, reason)
        report.changed.append(
            {
                "full_name": entry.full_name,
                "from": _label(downstream.level),
                "to": _label(entry.level),
            }
        )
        downstream.level = entry.level
        fields.append("level")

    details_changed = False
    for name, value in (
        ("full_name", entry.full_name),
        ("device", entry.device),
        ("oncalls", list(entry.oncalls)),
    ):
        if getattr(downstream, name) != value:
            setattr(downstream, name, value)
            fields.append(name)
            details_changed = True
    if details_changed and not level_differs and not confirmed:
        report.updated.append(entry.full_name)

    if fields:
        downstream.save(update_fields=fields)
    else:
        report.unchanged += 1


def learn_level_from_forward(full_name: str, level: int, at: datetime) -> Downstream:
    """Record the level a relay forward reported at `at`; newest history sets the level."""
    level = Level(level)
    reason = "downstream_repo_level in a relay forward"
    downstream = find_downstream(full_name)
    if downstream is None:
        try:
            # A savepoint, so a concurrent creator's win does not poison the outer transaction.
            with transaction.atomic():
                downstream = Downstream.objects.create(
                    full_name=full_name.strip(), level=level, created_at=at
                )
                _record(downstream, None, level, at, LevelChange.Source.FORWARD, reason)
                return downstream
        except IntegrityError:
            downstream = find_downstream(full_name)
            if downstream is None:
                raise

    with transaction.atomic():
        # The row lock serialises concurrent forwards for one repo (PostgreSQL); SQLite's
        # IMMEDIATE transactions already serialise writers.
        downstream = Downstream.objects.select_for_update().get(pk=downstream.pk)
        history = LevelChange.objects.filter(downstream=downstream)
        if downstream.pending_upstream:
            approved_at = (
                history.filter(source=LevelChange.Source.APPROVAL).order_by("-at", "-id").first()
            )
            if approved_at is None or at >= approved_at.at:
                # The relay still runs the old file; an approval here wins until the file agrees.
                return downstream
        previous = level_at(downstream, at)
        if previous == level:
            return downstream
        _record(downstream, previous, level, at, LevelChange.Source.FORWARD, reason)
        # Ties on `at` are ordered by id, so the row just written is newest unless a later one
        # exists; only then does the forward decide the effective level.
        if not history.filter(at__gt=at).exists():
            fields = []
            if downstream.level != level:
                downstream.level = level
                fields.append("level")
            if downstream.delisted:
                # The relay dispatched to it after the last delisting we know of.
                downstream.delisted = False
                fields.append("delisted")
            if fields:
                downstream.save(update_fields=fields)
        return downstream


def export_allowlist_text() -> str:
    """The current levels of listed downstreams as allowlist YAML, in the last import's style."""
    latest = AllowlistImport.objects.order_by("-imported_at", "-id").first()
    entries = [
        AllowlistEntry(
            full_name=downstream.full_name,
            level=downstream.level,
            device=downstream.device,
            oncalls=[str(login) for login in downstream.oncalls or []],
        )
        for downstream in Downstream.objects.filter(delisted=False).order_by(Lower("full_name"))
    ]
    return render_allowlist(entries, original_text=latest.text if latest else None)


# --- Effective level: the one copy (hud.promotion, hud.relay, hud.reads, hud.checks) --------
# An active override (unrevoked, created by `now`, unexpired) wins over the allowlist level;
# of several, the lowest level, then the newest.


# The overrides in force at a moment, which may be in the past (revoked later = still in force),
# written out: every page and the mirror ask (a PR page four times), and building the queryset
# cost twice its SQL.
_OVERRIDE_COLUMNS = tuple(sql.fields_by_column(LevelOverride))
_IN_FORCE = (
    f"SELECT {', '.join(_OVERRIDE_COLUMNS)} FROM {LevelOverride._meta.db_table}"
    " WHERE {backends} AND created_at <= %s AND expires_at > %s"
    " AND (revoked_at IS NULL OR revoked_at > %s)"
    # Same precedence as active_override: the lowest level, newest first.
    " ORDER BY downstream_id, level, created_at DESC"
)


def active_overrides(downstream_ids: list[int], now: dt.datetime) -> dict[int, LevelOverride]:
    """The override in force at `now` for each backend that has one (one query, any count)."""
    if not downstream_ids:
        return {}
    backends, params = sql.any_sql("downstream_id", downstream_ids)
    moment = connection.ops.adapt_datetimefield_value(now)
    overrides: dict[int, LevelOverride] = {}
    for row in sql.statement_rows(_IN_FORCE.format(backends=backends), [*params, *[moment] * 3]):
        override = sql.instance(LevelOverride, _OVERRIDE_COLUMNS, row)
        overrides.setdefault(override.downstream_id, override)
    return overrides


def active_override(downstream: Downstream, now: dt.datetime | None = None) -> LevelOverride | None:
    """The override in force at `now` (expiry is read-time: no task needs to run)."""
    return active_overrides([downstream.id], now or clock.now()).get(downstream.id)


def effective_level(downstream: Downstream, now: dt.datetime | None = None) -> int:
    """The level this server acts on: an active override wins over the allowlist level."""
    override = active_override(downstream, now)
    return override.level if override else downstream.level


def effective_levels(downstreams: Iterable[Downstream], now: dt.datetime) -> dict[int, int]:
    """Each downstream's effective level at `now` (one query, any count)."""
    levels = {d.id: d.level for d in downstreams}
    for downstream_id, override in active_overrides(list(levels), now).items():
        levels[downstream_id] = override.level
    return levels


def levels_at(downstream_ids: list[int], when: dt.datetime) -> dict[int, int | None]:
    """Each backend's effective level at `when` (a PR's time): its level history, and an
    override in force then wins. Two queries for any count; None = not listed then."""
    levels: dict[int, int | None] = {}
    history = (
        LevelChange.objects.filter(downstream_id__in=downstream_ids, at__lte=when)
        .order_by("downstream_id", "-at", "-id")
        .values_list("downstream_id", "to_level")
    )
    for downstream_id, level in history:
        levels.setdefault(downstream_id, level)
    for downstream_id, override in active_overrides(downstream_ids, when).items():
        levels[downstream_id] = override.level
    return levels
