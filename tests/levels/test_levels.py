"""Level history service: allowlist import/export, level_at, levels learnt from forwards."""

import datetime as dt
import io

import pytest
from django.core.management import CommandError, call_command

from hud.core.allowlist import AllowlistError, parse_allowlist
from hud.levels import (
    export_allowlist_text,
    find_downstream,
    import_allowlist,
    learn_level_from_forward,
    level_at,
)
from hud.models import AllowlistImport, Downstream, LevelChange

pytestmark = pytest.mark.django_db

UTC = dt.UTC
NOW = dt.datetime(2026, 11, 2, 12, 0, tzinfo=UTC)

FIRST = """\
# backends
L1:
  - org1/repo1
L2:
  - org2/repo2: alice  # on-call
L3:
  npu:
    org3/repo3: [bob]
"""

SECOND = """\
# backends
L1:
  - org1/repo1
L3:
  npu:
    org3/repo3: [bob]
  tpu:
    org2/repo2: [alice, carol]
L4:
  - org4/repo4
"""


def _changes(full_name: str) -> list[tuple]:
    downstream = find_downstream(full_name)
    return list(
        LevelChange.objects.filter(downstream=downstream)
        .order_by("at", "id")
        .values_list("from_level", "to_level", "source", "at")
    )


def _approve(full_name: str, level: int, at: dt.datetime) -> Downstream:
    """What an in-app approval does (promotion.py owns it; reproduced here minimally)."""
    downstream = find_downstream(full_name)
    LevelChange.objects.create(
        downstream=downstream,
        from_level=downstream.level,
        to_level=level,
        at=at,
        recorded_at=at,
        source=LevelChange.Source.APPROVAL,
    )
    downstream.level = level
    downstream.pending_upstream = True
    downstream.save(update_fields=["level", "pending_upstream"])
    return downstream


def test_first_import_creates_downstreams_with_history(frozen_clock):
    report = import_allowlist(FIRST, source="allowlist.yml")

    assert report.created == ["org1/repo1", "org2/repo2", "org3/repo3"]
    repo3 = find_downstream("org3/repo3")
    assert (repo3.level, repo3.device, repo3.oncalls, repo3.created_at) == (3, "npu", ["bob"], NOW)
    assert find_downstream("org2/repo2").oncalls == ["alice"]
    assert _changes("org3/repo3") == [(None, 3, "import", NOW)]
    stored = AllowlistImport.objects.get()
    assert stored.text == FIRST
    assert stored.report["created"] == report.created
    assert stored.effective_since == NOW


def test_second_import_of_the_same_file_changes_nothing(frozen_clock):
    import_allowlist(FIRST, source="allowlist.yml")
    frozen_clock.advance(hours=1)

    report = import_allowlist(FIRST, source="allowlist.yml")

    assert not report.has_changes
    assert report.unchanged == 3
    assert LevelChange.objects.count() == 3


def test_import_changes_levels_and_delists_missing_repos(frozen_clock):
    import_allowlist(FIRST, source="a")
    later = frozen_clock.advance(hours=1)

    report = import_allowlist(SECOND, source="b")

    assert report.changed == [{"full_name": "org2/repo2", "from": "L2", "to": "L3"}]
    assert report.created == ["org4/repo4"]
    assert report.unchanged == 2
    repo2 = find_downstream("org2/repo2")
    assert (repo2.level, repo2.device, repo2.oncalls) == (3, "tpu", ["alice", "carol"])
    assert _changes("org2/repo2")[-1] == (2, 3, "import", later)

    third = frozen_clock.advance(hours=1)
    report = import_allowlist("L1:\n  - org1/repo1\n", source="c")

    assert sorted(report.delisted) == ["org2/repo2", "org3/repo3", "org4/repo4"]
    repo3 = find_downstream("org3/repo3")
    assert repo3.delisted and repo3.level == 3  # history and last level kept
    assert _changes("org3/repo3") == [(None, 3, "import", NOW), (3, None, "import", third)]


def test_repo_back_in_the_file_is_relisted(frozen_clock):
    import_allowlist(FIRST, source="a")
    frozen_clock.advance(hours=1)
    import_allowlist("L1:\n  - org1/repo1\n", source="b")
    back = frozen_clock.advance(hours=1)

    report = import_allowlist("L1:\n  - org1/repo1\nL4:\n  - ORG3/repo3\n", source="c")

    assert report.relisted == ["ORG3/repo3"]
    repo3 = find_downstream("org3/repo3")
    assert not repo3.delisted
    assert (repo3.full_name, repo3.level) == ("ORG3/repo3", 4)
    assert _changes("org3/repo3")[-1] == (None, 4, "import", back)
    assert report.delisted == []  # org2 was already delisted: no second delisting


def test_since_back_dates_the_level_changes(frozen_clock):
    since = dt.datetime(2026, 9, 1, tzinfo=UTC)

    import_allowlist(FIRST, source="a", since=since)

    repo1 = find_downstream("org1/repo1")
    assert repo1.created_at == since
    assert _changes("org1/repo1") == [(None, 1, "import", since)]
    assert LevelChange.objects.first().recorded_at == NOW
    assert level_at(repo1, dt.datetime(2026, 10, 1, tzinfo=UTC)) == 1


def test_malformed_file_leaves_the_database_untouched(frozen_clock):
    import_allowlist(FIRST, source="a")
    before = (Downstream.objects.count(), LevelChange.objects.count())

    with pytest.raises(AllowlistError, match=r"L2\[1\]"):
        import_allowlist("L2:\n  - a/b\n  - [x]\n", source="bad")

    assert (Downstream.objects.count(), LevelChange.objects.count()) == before
    assert AllowlistImport.objects.count() == 1


def test_dry_run_reports_without_writing(frozen_clock):
    report = import_allowlist(FIRST, source="a", dry_run=True)

    assert report.created == ["org1/repo1", "org2/repo2", "org3/repo3"]
    assert report.import_id is None
    assert Downstream.objects.count() == 0
    assert AllowlistImport.objects.count() == 0


def test_import_disagreeing_with_pending_approval_reports_conflict_and_keeps_it(frozen_clock):
    import_allowlist(FIRST, source="a")
    _approve("org2/repo2", 3, frozen_clock.advance(hours=1))
    frozen_clock.advance(hours=1)

    report = import_allowlist(FIRST, source="a")

    assert report.conflicts == [{"full_name": "org2/repo2", "file": "L2", "approved": "L3"}]
    repo2 = find_downstream("org2/repo2")
    assert (repo2.level, repo2.pending_upstream) == (3, True)
    assert _changes("org2/repo2")[-1][2] == "approval"


def test_pending_approval_for_a_repo_missing_from_the_file_is_not_delisted(frozen_clock):
    import_allowlist(FIRST, source="a")
    _approve("org1/repo1", 2, frozen_clock.advance(hours=1))

    report = import_allowlist(
        "L2:\n  - org2/repo2: alice\nL3:\n  npu:\n    org3/repo3: [bob]\n", source="b"
    )

    assert report.conflicts == [{"full_name": "org1/repo1", "file": "absent", "approved": "L2"}]
    assert not find_downstream("org1/repo1").delisted


def test_import_agreeing_with_pending_approval_clears_pending(frozen_clock):
    import_allowlist(FIRST, source="a")
    _approve("org2/repo2", 3, frozen_clock.advance(hours=1))
    frozen_clock.advance(hours=1)
    changes_before = LevelChange.objects.count()

    report = import_allowlist(SECOND, source="b")

    assert report.confirmed == ["org2/repo2"]
    assert report.conflicts == []
    repo2 = find_downstream("org2/repo2")
    assert (repo2.level, repo2.pending_upstream, repo2.device) == (3, False, "tpu")
    # Only org4/repo4 is new history; the approval already recorded org2's change.
    assert LevelChange.objects.count() == changes_before + 1


def test_level_at_follows_history(frozen_clock):
    import_allowlist(FIRST, source="a", since=dt.datetime(2026, 9, 1, tzinfo=UTC))
    import_allowlist(SECOND, source="b", since=dt.datetime(2026, 10, 1, tzinfo=UTC))
    import_allowlist("L1:\n  - org1/repo1\n", source="c")
    repo2 = find_downstream("org2/repo2")

    assert level_at(repo2, dt.datetime(2026, 8, 31, tzinfo=UTC)) is None
    assert level_at(repo2, dt.datetime(2026, 9, 1, tzinfo=UTC)) == 2
    assert level_at(repo2, dt.datetime(2026, 9, 30, tzinfo=UTC)) == 2
    assert level_at(repo2, dt.datetime(2026, 10, 1, tzinfo=UTC)) == 3
    assert level_at(repo2, NOW) is None  # delisted


def test_forward_creates_an_unknown_downstream_case_insensitively(frozen_clock):
    at = dt.datetime(2026, 10, 5, tzinfo=UTC)

    created = learn_level_from_forward("Org9/Repo9", 2, at)
    again = learn_level_from_forward("org9/repo9", 2, at + dt.timedelta(hours=1))

    assert again.pk == created.pk
    assert (created.level, created.created_at) == (2, at)
    assert _changes("org9/repo9") == [(None, 2, "forward", at)]


def test_forward_back_dated_history_does_not_override_a_newer_level(frozen_clock):
    import_allowlist(FIRST, source="a", since=dt.datetime(2026, 10, 1, tzinfo=UTC))
    old = dt.datetime(2026, 8, 1, tzinfo=UTC)

    repo2 = learn_level_from_forward("org2/repo2", 1, old)

    assert repo2.level == 2  # the import on Oct 1 is newer
    assert level_at(repo2, dt.datetime(2026, 8, 15, tzinfo=UTC)) == 1
    assert level_at(repo2, dt.datetime(2026, 10, 15, tzinfo=UTC)) == 2
    assert _changes("org2/repo2")[0] == (None, 1, "forward", old)


def test_forward_newer_than_history_sets_the_level(frozen_clock):
    import_allowlist(FIRST, source="a", since=dt.datetime(2026, 10, 1, tzinfo=UTC))
    at = dt.datetime(2026, 10, 20, tzinfo=UTC)

    repo2 = learn_level_from_forward("org2/repo2", 3, at)

    assert find_downstream("org2/repo2").level == 3 == repo2.level
    assert _changes("org2/repo2")[-1] == (2, 3, "forward", at)


def test_forward_agreeing_with_history_records_nothing(frozen_clock):
    import_allowlist(FIRST, source="a", since=dt.datetime(2026, 10, 1, tzinfo=UTC))

    learn_level_from_forward("org2/repo2", 2, dt.datetime(2026, 10, 20, tzinfo=UTC))

    assert len(_changes("org2/repo2")) == 1


def test_forward_does_not_undo_a_pending_approval(frozen_clock):
    import_allowlist(FIRST, source="a")
    _approve("org2/repo2", 3, frozen_clock.advance(hours=1))

    repo2 = learn_level_from_forward("org2/repo2", 2, frozen_clock.advance(hours=1))

    assert (repo2.level, repo2.pending_upstream) == (3, True)
    assert _changes("org2/repo2")[-1][2] == "approval"


def test_import_command_prints_the_report(frozen_clock, tmp_path):
    path = tmp_path / "allowlist.yml"
    path.write_text(FIRST, encoding="utf-8")
    out = io.StringIO()

    call_command("import_allowlist", str(path), "--since", "2026-09-01", stdout=out)

    text = out.getvalue()
    assert "created   org3/repo3" in text
    assert "3 created, 0 changed" in text
    assert _changes("org1/repo1")[0][3] == dt.datetime(2026, 9, 1, tzinfo=UTC)


def test_import_command_dry_run_writes_nothing(frozen_clock, tmp_path):
    path = tmp_path / "allowlist.yml"
    path.write_text(FIRST, encoding="utf-8")
    out = io.StringIO()

    call_command("import_allowlist", str(path), "--dry-run", stdout=out)

    assert out.getvalue().startswith("Dry run")
    assert Downstream.objects.count() == 0


def test_import_command_defaults_to_the_configured_allowlist(frozen_clock, tmp_path, settings):
    path = tmp_path / "allowlist.yml"
    path.write_text(FIRST, encoding="utf-8")
    settings.CRCR_ALLOWLIST = str(path)

    call_command("import_allowlist", stdout=io.StringIO())

    assert Downstream.objects.count() == 3


def test_import_command_with_malformed_file_fails_and_changes_nothing(frozen_clock, tmp_path):
    path = tmp_path / "allowlist.yml"
    path.write_text("L4:\n  - a/b\n  - {c/d: x, e/f: y}\n", encoding="utf-8")

    with pytest.raises(CommandError, match=r"L4\[1\]: expected 'owner/repo' or a single-key map"):
        call_command("import_allowlist", str(path), stdout=io.StringIO())

    assert Downstream.objects.count() == 0
    assert AllowlistImport.objects.count() == 0


def test_import_command_rejects_a_bad_since_date(tmp_path):
    with pytest.raises(CommandError, match="YYYY-MM-DD"):
        call_command("import_allowlist", str(tmp_path / "x.yml"), "--since", "yesterday")


def test_export_keeps_comments_and_order_and_writes_current_levels(frozen_clock, tmp_path):
    import_allowlist(FIRST, source="a")
    _approve("org1/repo1", 2, frozen_clock.advance(hours=1))
    learn_level_from_forward("new/backend", 1, frozen_clock.advance(hours=1))
    output = tmp_path / "out.yml"

    call_command("export_allowlist", "-o", str(output), stderr=io.StringIO())

    text = output.read_text(encoding="utf-8")
    assert text == (
        "# backends\n"
        "L1:\n"
        "  - new/backend\n"
        "L2:\n"
        "  - org2/repo2: alice  # on-call\n"
        "  - org1/repo1\n"
        "L3:\n"
        "  npu:\n"
        "    org3/repo3: [bob]\n"
    )
    assert text == export_allowlist_text()


def test_export_leaves_out_delisted_repos(frozen_clock):
    import_allowlist(FIRST, source="a")
    import_allowlist("L1:\n  - org1/repo1\n", source="b")

    assert [e.full_name for e in parse_allowlist(export_allowlist_text()).entries] == ["org1/repo1"]


@pytest.mark.django_db(transaction=True)
def test_concurrent_forwards_for_a_new_repo_create_one_downstream(frozen_clock):
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection

    at = dt.datetime(2026, 10, 5, tzinfo=UTC)

    def forward(name: str) -> int:
        try:
            return learn_level_from_forward(name, 2, at).pk
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=4) as pool:
        ids = set(pool.map(forward, ["org/new", "ORG/new", "org/NEW", "Org/New"] * 2))

    assert len(ids) == 1
    assert Downstream.objects.count() == 1
    assert LevelChange.objects.count() == 1
