"""Parse and write the allowlist file (`.github/allowlist.yml` in pytorch/pytorch).

Pure: no ORM. The format (CRCR.md, "Allowlist file"): L1, L2 and L4 are lists of
`owner/repo` strings or single-key maps `owner/repo: "a, b"`; L3 is a map device →
{repo: [oncalls]}. A repo appears at most once across levels, compared case-insensitively.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError
from ruamel.yaml.tokens import CommentToken

LEVEL_KEYS = ("L1", "L2", "L3", "L4")
LIST_LEVELS = ("L1", "L2", "L4")

# GitHub's own rules: owners are alphanumeric with inner hyphens (≤ 39), repos add . and _.
_OWNER = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})"
_REPO = r"[A-Za-z0-9._-]{1,100}"
_FULL_NAME_RE = re.compile(rf"{_OWNER}/{_REPO}")
_LOGIN_RE = re.compile(rf"^{_OWNER}$")
# The device becomes the label suffix `ciflow/crcr/<device>`, so keep it label-safe.
_DEVICE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_MAX_BYTES = 1_000_000


class AllowlistError(ValueError):
    """The allowlist file is malformed; the message names the level and index."""


@dataclass
class AllowlistEntry:
    """One allowlisted repository at one level."""

    full_name: str
    level: int
    device: str = ""
    oncalls: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        """The case-insensitive identity of the repository."""
        return self.full_name.lower()


@dataclass
class Allowlist:
    """A parsed allowlist: its entries in file order."""

    entries: list[AllowlistEntry] = field(default_factory=list)

    def get(self, full_name: str) -> AllowlistEntry | None:
        """The entry for a repository, compared case-insensitively, or None."""
        key = full_name.lower()
        return next((entry for entry in self.entries if entry.key == key), None)

    def by_key(self) -> dict[str, AllowlistEntry]:
        """Entries keyed by lower-cased full name."""
        return {entry.key: entry for entry in self.entries}

    def at_level(self, level: int) -> list[AllowlistEntry]:
        """Entries at one level, in file order."""
        return [entry for entry in self.entries if entry.level == level]


# --- Parsing -------------------------------------------------------------------------------


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "map"
    return type(value).__name__


def is_repository_name(name: str) -> bool:
    """Whether `name` follows GitHub's owner/repo grammar (every repository name is checked)."""
    return bool(_FULL_NAME_RE.fullmatch(name)) and name.split("/", 1)[1] not in {".", ".."}


def _full_name(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise AllowlistError(f"{where}: expected 'owner/repo', got {_type_name(value)}")
    name = value.strip()
    if not is_repository_name(name):
        raise AllowlistError(f"{where}: {value!r} is not a valid 'owner/repo' name")
    return name


def _oncalls(value: object, where: str) -> list[str]:
    """On-calls as a comma-separated string, a list of logins, or nothing."""
    if value is None:
        return []
    if isinstance(value, str):
        raw = value.split(",")
    elif isinstance(value, list):
        raw = []
        for index, item in enumerate(value):
            if not isinstance(item, str):
                raise AllowlistError(
                    f"{where}[{index}]: expected an on-call login, got {_type_name(item)}"
                )
            raw.append(item)
    else:
        raise AllowlistError(
            f"{where}: expected on-calls as 'a, b' or a list, got {_type_name(value)}"
        )
    logins = []
    for item in raw:
        login = item.strip().removeprefix("@")
        if not login:
            continue
        if not _LOGIN_RE.match(login):
            raise AllowlistError(f"{where}: {item.strip()!r} is not a valid GitHub login")
        logins.append(login)
    return logins


def _load_yaml(text: str) -> object:
    try:
        return YAML(typ="safe", pure=True).load(text)
    except YAMLError as error:
        raise AllowlistError(f"not valid YAML: {error}") from error


def parse_allowlist(text: str) -> Allowlist:
    """Parse the allowlist YAML; AllowlistError names the level and index of a fault."""
    document = _load_yaml(text)
    if document is None:
        return Allowlist()
    if not isinstance(document, dict):
        raise AllowlistError(f"top level: expected a map of L1..L4, got {_type_name(document)}")
    unknown = [str(key) for key in document if key not in LEVEL_KEYS]
    if unknown:
        raise AllowlistError(
            f"top level: unknown key(s) {', '.join(map(repr, unknown))}; expected L1, L2, L3, L4"
        )
    entries: list[AllowlistEntry] = []
    seen: dict[str, str] = {}  # lower-cased name → where it was first listed

    def add(entry: AllowlistEntry, where: str) -> None:
        if entry.key in seen:
            raise AllowlistError(
                f"{where}: {entry.full_name} is already listed at {seen[entry.key]}"
                " (a repo appears at most once, names compare case-insensitively)"
            )
        seen[entry.key] = where
        entries.append(entry)

    for level_key, section in document.items():
        level = int(level_key[1])
        if section is None:
            continue
        if level_key == "L3":
            _parse_l3(section, add)
            continue
        if not isinstance(section, list):
            raise AllowlistError(f"{level_key}: expected a list, got {_type_name(section)}")
        for index, item in enumerate(section):
            where = f"{level_key}[{index}]"
            if isinstance(item, str):
                add(AllowlistEntry(_full_name(item, where), level), where)
            elif isinstance(item, dict) and len(item) == 1:
                ((name, oncalls),) = item.items()
                add(
                    AllowlistEntry(_full_name(name, where), level, "", _oncalls(oncalls, where)),
                    where,
                )
            else:
                got = _type_name(item)
                if isinstance(item, dict):
                    got = f"a map with {len(item)} keys"
                raise AllowlistError(
                    f"{where}: expected 'owner/repo' or a single-key map, got {got}"
                )
    return Allowlist(entries)


def _parse_l3(section: object, add: Callable[[AllowlistEntry, str], None]) -> None:
    if not isinstance(section, dict):
        raise AllowlistError(f"L3: expected a map of device → repos, got {_type_name(section)}")
    for device, repos in section.items():
        if not isinstance(device, str) or not _DEVICE_RE.match(device):
            raise AllowlistError(f"L3[{device!r}]: not a valid device name")
        if repos is None:
            continue
        if not isinstance(repos, dict):
            raise AllowlistError(
                f"L3[{device}]: expected a map of 'owner/repo' → on-calls, got {_type_name(repos)}"
            )
        for index, (name, oncalls) in enumerate(repos.items()):
            where = f"L3[{device}][{index}]"
            full_name = _full_name(name, where)
            add(AllowlistEntry(full_name, 3, device, _oncalls(oncalls, where)), where)


def load_allowlist_text(source: str, timeout: float = 10.0) -> str:
    """Read the allowlist from a file path or an https URL (plain http is refused)."""
    if "://" in source:
        if not source.lower().startswith("https://"):
            raise AllowlistError(f"refusing to fetch {source!r}: only https URLs are allowed")
        try:
            response = httpx.get(source, timeout=timeout, follow_redirects=True)
        except httpx.HTTPError as error:
            raise AllowlistError(f"could not fetch {source}: {error}") from error
        # A redirect must not downgrade the transport.
        if response.url.scheme != "https":
            raise AllowlistError(f"refusing {source}: redirected to a non-https URL")
        if response.status_code != 200:
            raise AllowlistError(f"could not fetch {source}: HTTP {response.status_code}")
        if len(response.content) > _MAX_BYTES:
            raise AllowlistError(f"{source}: larger than {_MAX_BYTES} bytes")
        return response.text
    try:
        return Path(source).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise AllowlistError(f"could not read {source}: {error}") from error


# --- Rendering -----------------------------------------------------------------------------


def _round_trip_yaml() -> YAML:
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.width = 4096
    return yaml


def _flow_list(items: list[str]) -> CommentedSeq:
    seq = CommentedSeq(items)
    seq.fa.set_flow_style()
    return seq


def _list_item(entry: AllowlistEntry) -> str | CommentedMap:
    if not entry.oncalls:
        return entry.full_name
    return CommentedMap([(entry.full_name, ", ".join(entry.oncalls))])


def _fresh_document(entries: list[AllowlistEntry]) -> CommentedMap:
    document = CommentedMap()
    for level_key in LEVEL_KEYS:
        level = int(level_key[1])
        at_level = [entry for entry in entries if entry.level == level]
        if level_key == "L3":
            devices = CommentedMap()
            for entry in at_level:
                devices.setdefault(entry.device, CommentedMap())[entry.full_name] = _flow_list(
                    list(entry.oncalls)
                )
            document[level_key] = devices
        else:
            document[level_key] = CommentedSeq(_list_item(entry) for entry in at_level)
    return document


def _dump(document: object) -> str:
    stream = io.StringIO()
    _round_trip_yaml().dump(document, stream)
    return stream.getvalue()


def render_allowlist(
    entries: Iterable[AllowlistEntry] | Allowlist, original_text: str | None = None
) -> str:
    """Write entries as allowlist YAML, keeping the comments and order of `original_text`."""
    entry_list = list(entries.entries if isinstance(entries, Allowlist) else entries)
    _check_unique(entry_list)
    if not original_text or not original_text.strip():
        return _dump(_fresh_document(entry_list))
    parse_allowlist(original_text)  # only a valid file is merged into
    document = _round_trip_yaml().load(original_text)
    if not isinstance(document, CommentedMap):
        return _dump(_fresh_document(entry_list))
    _merge(document, entry_list)
    return _dump(document)


def _check_unique(entries: list[AllowlistEntry]) -> None:
    seen: set[str] = set()
    for entry in entries:
        if entry.level not in (1, 2, 3, 4):
            raise AllowlistError(f"{entry.full_name}: level {entry.level} is not 1..4")
        if entry.level == 3 and not entry.device:
            raise AllowlistError(f"{entry.full_name}: an L3 entry needs a device")
        if entry.key in seen:
            raise AllowlistError(f"{entry.full_name}: listed twice")
        seen.add(entry.key)


# Comments in ruamel hang off the item *before* them: the token after an item holds its
# end-of-line comment plus any full-line comments that introduce the next item. When an item
# is dropped, those following lines are handed to the previous kept item so they survive.


def _seq_token(seq: CommentedSeq, index: int) -> CommentToken | None:
    item = seq[index]
    if isinstance(item, CommentedMap) and len(item) == 1:
        slots = item.ca.items.get(next(iter(item)))
        return slots[2] if slots and len(slots) > 2 else None
    slots = seq.ca.items.get(index)
    return slots[0] if slots else None


def _set_seq_token(seq: CommentedSeq, index: int, token: CommentToken) -> None:
    item = seq[index]
    if isinstance(item, CommentedMap) and len(item) == 1:
        slots = item.ca.items.setdefault(next(iter(item)), [None, None, None, None])
        slots[2] = token
    else:
        slots = seq.ca.items.setdefault(index, [None, None, None, None])
        slots[0] = token


def _following_lines(token: CommentToken | None) -> str:
    if token is None or "\n" not in token.value:
        return ""
    return token.value.split("\n", 1)[1]


def _append_lines(token: CommentToken | None, lines: str) -> CommentToken:
    if token is None:
        return CommentToken("\n" + lines, None, None)
    token.value = token.value if token.value.endswith("\n") else token.value + "\n"
    token.value += lines
    return token


def _hand_to_container(container: CommentedSeq | CommentedMap, lines: str) -> None:
    """Give comment lines to the container's own line when the first child is dropped."""
    comment = container.ca.comment
    if comment and comment[0] is not None:
        _append_lines(comment[0], lines)


def _drop_seq_item(seq: CommentedSeq, index: int) -> None:
    lines = _following_lines(_seq_token(seq, index))
    if lines and index > 0:
        _set_seq_token(seq, index - 1, _append_lines(_seq_token(seq, index - 1), lines))
    elif lines and len(seq) > 1:
        _hand_to_container(seq, lines)
    del seq[index]


def _drop_map_key(mapping: CommentedMap, key: str) -> None:
    keys = list(mapping)
    slots = mapping.ca.items.get(key)
    lines = _following_lines(slots[2] if slots and len(slots) > 2 else None)
    position = keys.index(key)
    if lines and position > 0 and not isinstance(mapping[keys[position - 1]], dict | list):
        previous = mapping.ca.items.setdefault(keys[position - 1], [None, None, None, None])
        previous[2] = _append_lines(previous[2], lines)
    elif lines and position == 0 and len(keys) > 1:
        _hand_to_container(mapping, lines)
    del mapping[key]


def _same_oncalls(value: object, oncalls: list[str]) -> bool:
    try:
        return _oncalls(value, "") == oncalls
    except AllowlistError:
        return False


def _merge(document: CommentedMap, entries: list[AllowlistEntry]) -> None:
    wanted = {entry.key: entry for entry in entries}
    placed: set[str] = set()

    for level_key in [key for key in document if key in LEVEL_KEYS]:
        level = int(level_key[1])
        section = document[level_key]
        if section is None:
            continue
        if level_key == "L3":
            for device in list(section):
                repos = section[device]
                if repos is None:
                    continue
                had_repos = len(repos) > 0
                for name in list(repos):
                    entry = wanted.get(str(name).lower())
                    if entry is None or entry.level != 3 or entry.device != device:
                        _drop_map_key(repos, name)
                        continue
                    placed.add(entry.key)
                    if entry.full_name != name:
                        # A respelt name cannot keep its key in place; rewrite it.
                        position = list(repos).index(name)
                        del repos[name]
                        repos.insert(position, entry.full_name, _flow_list(entry.oncalls))
                    elif not _same_oncalls(repos[name], entry.oncalls):
                        repos[name] = _flow_list(list(entry.oncalls))
                if had_repos and not repos:
                    _drop_map_key(section, device)
            continue
        for index in range(len(section) - 1, -1, -1):
            item = section[index]
            name = item if isinstance(item, str) else next(iter(item))
            entry = wanted.get(str(name).lower())
            if entry is None or entry.level != level:
                _drop_seq_item(section, index)
                continue
            placed.add(entry.key)
            value = None if isinstance(item, str) else item[name]
            if entry.full_name == name and _same_oncalls(value, entry.oncalls):
                continue
            if isinstance(item, CommentedMap) and entry.oncalls:
                if entry.full_name != name:
                    position = list(item).index(name)
                    del item[name]
                    item.insert(position, entry.full_name, ", ".join(entry.oncalls))
                else:
                    item[name] = ", ".join(entry.oncalls)
            else:
                token = _seq_token(section, index)
                section[index] = _list_item(entry)
                if token is not None:
                    _set_seq_token(section, index, token)

    for entry in entries:
        if entry.key in placed:
            continue
        level_key = f"L{entry.level}"
        if document.get(level_key) is None:
            _insert_level(document, level_key)
        if entry.level == 3:
            devices = document[level_key]
            if devices.get(entry.device) is None:
                devices[entry.device] = CommentedMap()
            devices[entry.device][entry.full_name] = _flow_list(list(entry.oncalls))
        else:
            document[level_key].append(_list_item(entry))


def _insert_level(document: CommentedMap, level_key: str) -> None:
    empty = CommentedMap() if level_key == "L3" else CommentedSeq()
    if level_key in document:
        document[level_key] = empty
        return
    # Keep levels in their natural order: after the last lower level present.
    position = 0
    for index, key in enumerate(document):
        if key in LEVEL_KEYS and key < level_key:
            position = index + 1
    document.insert(position, level_key, empty)
