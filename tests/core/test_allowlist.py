"""Pure tests of the allowlist parser and writer (no database)."""

import pytest

from hud.core.allowlist import (
    Allowlist,
    AllowlistEntry,
    AllowlistError,
    load_allowlist_text,
    parse_allowlist,
    render_allowlist,
)

SPEC_EXAMPLE = """\
L1:
  - org1/repo1
L2:
  - org3/repo3
L3:
  device1:                        # label ciflow/crcr/device1 turns the check run on
    org41/device1-repo: [oncall1, oncall2]
L4:
  - org5/repo5: oncall1, oncall2  # oncalls: comma-separated string
"""

COMMENTED = """\
# CRCR allowlist: see RFC-0050
L1:  # forwarded only
  - org1/repo1  # new backend
  # waiting for the team to set up the callback
  - org1/repo2
  - org1/with-oncall: alice, bob
L2:
  - org3/repo3
L3:
  device1:                        # label ciflow/crcr/device1
    org41/device1-repo: [oncall1, oncall2]  # TPU
    # the second board
    org42/board: carol
L4:
  - org5/repo5: oncall1, oncall2  # blocks merge
# end of file
"""


def test_spec_example_parses_into_entries_in_file_order():
    allowlist = parse_allowlist(SPEC_EXAMPLE)
    assert allowlist.entries == [
        AllowlistEntry("org1/repo1", 1),
        AllowlistEntry("org3/repo3", 2),
        AllowlistEntry("org41/device1-repo", 3, "device1", ["oncall1", "oncall2"]),
        AllowlistEntry("org5/repo5", 4, "", ["oncall1", "oncall2"]),
    ]


def test_l3_accepts_comma_separated_oncalls_and_null():
    allowlist = parse_allowlist("L3:\n  npu:\n    a/b: x, y\n    c/d:\n")
    assert allowlist.get("a/b").oncalls == ["x", "y"]
    assert allowlist.get("c/d").oncalls == []


def test_empty_levels_and_empty_file_are_allowed():
    assert parse_allowlist("") == Allowlist()
    assert parse_allowlist("L1:\nL2: []\nL3: {}\nL4:\n").entries == []


def test_get_compares_names_case_insensitively():
    allowlist = parse_allowlist(SPEC_EXAMPLE)
    assert allowlist.get("ORG5/Repo5").full_name == "org5/repo5"
    assert allowlist.get("nobody/here") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "L2:\n  - a/b\n  - c/d\n  - e/f\n  - [x, y]\n",
            "L2[3]: expected 'owner/repo' or a single-key map, got list",
        ),
        ("L4:\n  - a/b: x\n    c/d: y\n", "L4[0]: expected 'owner/repo' or a single-key map"),
        ("L1:\n  - not-a-repo\n", "L1[0]: 'not-a-repo' is not a valid 'owner/repo' name"),
        ("L1:\n  - a/b/c\n", "L1[0]"),
        ("L1:\n  - 42\n", "L1[0]: expected 'owner/repo' or a single-key map, got number"),
        ("L2: a/b\n", "L2: expected a list, got string"),
        ("L3:\n  - a/b\n", "L3: expected a map of device"),
        ("L3:\n  npu:\n    - a/b\n", "L3[npu]: expected a map"),
        ("L3:\n  npu:\n    a/b: [x]\n    c/d: {k: v}\n", "L3[npu][1]: expected on-calls"),
        ("L4:\n  - a/b: 'al ice'\n", "L4[0]: 'al ice' is not a valid GitHub login"),
        ("L5:\n  - a/b\n", "top level: unknown key(s) 'L5'"),
        ("- a/b\n", "top level: expected a map of L1..L4, got list"),
        ("L1: [a/b\n", "not valid YAML"),
    ],
)
def test_malformed_file_error_names_level_and_index(text, message):
    with pytest.raises(AllowlistError) as raised:
        parse_allowlist(text)
    assert message in str(raised.value)


def test_duplicate_repo_across_levels_is_detected_case_insensitively_naming_both_places():
    text = "L1:\n  - Org/Repo\nL3:\n  npu:\n    org/repo: [x]\n"
    with pytest.raises(AllowlistError) as raised:
        parse_allowlist(text)
    assert "L3[npu][0]: org/repo is already listed at L1[0]" in str(raised.value)


def test_duplicate_repo_within_one_level_is_an_error():
    with pytest.raises(AllowlistError, match=r"L2\[1\]: A/B is already listed at L2\[0\]"):
        parse_allowlist("L2:\n  - a/b\n  - A/B\n")


def test_render_without_original_writes_the_spec_format():
    text = render_allowlist(parse_allowlist(SPEC_EXAMPLE))
    assert text == (
        "L1:\n"
        "  - org1/repo1\n"
        "L2:\n"
        "  - org3/repo3\n"
        "L3:\n"
        "  device1:\n"
        "    org41/device1-repo: [oncall1, oncall2]\n"
        "L4:\n"
        "  - org5/repo5: oncall1, oncall2\n"
    )
    assert parse_allowlist(text) == parse_allowlist(SPEC_EXAMPLE)


def test_render_of_empty_levels_parses_back_empty():
    assert parse_allowlist(render_allowlist([])).entries == []


@pytest.mark.parametrize("text", [SPEC_EXAMPLE, COMMENTED])
def test_round_trip_with_original_is_identical_and_keeps_comments(text):
    rendered = render_allowlist(parse_allowlist(text), original_text=text)
    assert parse_allowlist(rendered) == parse_allowlist(text)
    assert rendered == text


def test_render_with_original_moves_updates_appends_and_drops_keeping_comments():
    entries = parse_allowlist(COMMENTED).entries
    by_name = {entry.full_name: entry for entry in entries}
    by_name["org1/repo2"].oncalls = ["dave"]  # scalar item gains on-calls
    by_name["org3/repo3"].level = 3  # L2 → L3 on a new device
    by_name["org3/repo3"].device = "npu"
    by_name["org41/device1-repo"].oncalls = ["oncall1"]
    del by_name["org1/repo1"]  # dropped: its following comment moves up
    del by_name["org42/board"]
    wanted = [*by_name.values(), AllowlistEntry("new/backend", 2, "", ["erin"])]

    rendered = render_allowlist(wanted, original_text=COMMENTED)

    assert parse_allowlist(rendered).by_key() == {entry.key: entry for entry in wanted}
    assert rendered == (
        "# CRCR allowlist: see RFC-0050\n"
        "L1:  # forwarded only\n"
        "  # waiting for the team to set up the callback\n"
        "  - org1/repo2: dave\n"
        "  - org1/with-oncall: alice, bob\n"
        "L2:\n"
        "  - new/backend: erin\n"
        "L3:\n"
        "  device1:                        # label ciflow/crcr/device1\n"
        # ruamel keeps a comment in its original column.
        "    org41/device1-repo: [oncall1]           # TPU\n"
        "    # the second board\n"
        "  npu:\n"
        "    org3/repo3: []\n"
        "L4:\n"
        "  - org5/repo5: oncall1, oncall2  # blocks merge\n"
        "# end of file\n"
    )


def test_render_with_original_adds_a_missing_level_in_order():
    original = "# only two levels\nL1:\n  - a/b\nL4:\n  - c/d\n"
    rendered = render_allowlist(
        [AllowlistEntry("a/b", 1), AllowlistEntry("e/f", 2), AllowlistEntry("c/d", 4)],
        original_text=original,
    )
    assert rendered == "# only two levels\nL1:\n  - a/b\nL2:\n  - e/f\nL4:\n  - c/d\n"


def test_render_refuses_duplicates_and_l3_without_device():
    with pytest.raises(AllowlistError, match="listed twice"):
        render_allowlist([AllowlistEntry("a/b", 1), AllowlistEntry("A/b", 2)])
    with pytest.raises(AllowlistError, match="needs a device"):
        render_allowlist([AllowlistEntry("a/b", 3)])


def test_load_reads_a_path(tmp_path):
    path = tmp_path / "allowlist.yml"
    path.write_text(SPEC_EXAMPLE, encoding="utf-8")
    assert load_allowlist_text(str(path)) == SPEC_EXAMPLE


def test_load_refuses_plain_http_and_other_schemes():
    with pytest.raises(AllowlistError, match="only https"):
        load_allowlist_text("http://example.com/allowlist.yml")
    with pytest.raises(AllowlistError, match="only https"):
        load_allowlist_text("file:///etc/passwd")


def test_load_of_a_missing_file_is_an_allowlist_error(tmp_path):
    with pytest.raises(AllowlistError, match="could not read"):
        load_allowlist_text(str(tmp_path / "missing.yml"))
