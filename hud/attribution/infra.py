"""Infrastructure: the infra signatures (infra_signatures.yml or CRCR_INFRA_SIGNATURES), their
validation and matching, and rule 2 (timed out, cancelled, no tests ran, a signature)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings

from hud import stats
from hud.attribution.evidence import _Loaded, _tests_of
from hud.core import files

DEFAULT_SIGNATURES_PATH = Path(__file__).with_name("infra_signatures.yml")


SIGNATURE_FIELDS = ("conclusion", "tests", "message", "verdict_category")


@dataclass(frozen=True)
class Signature:
    """One infrastructure signature: regexes that must all match a failed job."""

    name: str
    description: str
    patterns: tuple[tuple[str, re.Pattern[str]], ...]

    def match(self, job: Mapping[str, Any], messages: Iterable[str]) -> str | None:
        """The field and text that matched (the last field checked), or None."""
        matched = None
        for field_name, pattern in self.patterns:
            if field_name == "message":
                hit = next((m for m in messages if pattern.search(m)), None)
                if hit is None:
                    return None
                matched = f"message: {hit[:200]}"
                continue
            text = signature_text(field_name, job)
            if not pattern.search(text):
                return None
            matched = f"{field_name}: {text}"
        return matched


def signature_text(field_name: str, job: Mapping[str, Any]) -> str:
    """The text a signature field is matched against for one job row."""
    if field_name == "conclusion":
        return job.get("conclusion") or ""
    if field_name == "tests":
        parts = []
        for count in ("passed", "failed", "skipped", "total"):
            value = job.get(f"tests_{count}")
            parts.append(f"{count}={'none' if value is None else int(value)}")
        return " ".join(parts)
    if field_name == "verdict_category":
        verdict = job.get("triage_verdict")
        return str(verdict.get("category", "")) if isinstance(verdict, Mapping) else ""
    raise KeyError(field_name)


def signatures_path() -> Path:
    """CRCR_INFRA_SIGNATURES (a setting, from the environment), else the shipped defaults."""
    configured = getattr(settings, "CRCR_INFRA_SIGNATURES", None)
    return Path(configured) if configured else DEFAULT_SIGNATURES_PATH


def parse_signatures(data: Any, source: str = "") -> tuple[Signature, ...]:
    """Validate a signatures mapping (as loaded from YAML); ValueError names the bad entry."""
    if not isinstance(data, Mapping) or not isinstance(data.get("signatures", []), list):
        raise ValueError(f"{source}: expected a mapping with a 'signatures' list")
    out = []
    for index, raw in enumerate(data.get("signatures") or []):
        where = f"{source} signatures[{index}]"
        if not isinstance(raw, Mapping) or not raw.get("name"):
            raise ValueError(f"{where}: a signature is a mapping with a name")
        unknown = set(raw) - {"name", "description", *SIGNATURE_FIELDS}
        if unknown:
            raise ValueError(f"{where} ({raw['name']}): unknown keys {sorted(unknown)}")
        patterns = []
        for field_name in SIGNATURE_FIELDS:
            if field_name in raw:
                try:
                    patterns.append((field_name, re.compile(str(raw[field_name]))))
                except re.error as exc:
                    raise ValueError(f"{where} ({raw['name']}).{field_name}: {exc}") from exc
        if not patterns:
            raise ValueError(f"{where} ({raw['name']}): give at least one of {SIGNATURE_FIELDS}")
        out.append(Signature(str(raw["name"]), str(raw.get("description", "")), tuple(patterns)))
    return tuple(out)


def load_signatures(path: str | Path | None = None) -> tuple[Signature, ...]:
    """Load and validate the infra signatures at `path` (default: `signatures_path()`)."""
    return files.parsed(Path(path) if path else signatures_path(), _parse_file)


def _parse_file(source: Path) -> tuple[Signature, ...]:
    with source.open(encoding="utf-8") as handle:
        return parse_signatures(yaml.safe_load(handle) or {}, str(source))


def _no_tests_ran(row: Mapping[str, Any], tests: list) -> str | None:
    if tests:
        return None
    if row.get("tests_total") == 0:
        return "tests_total = 0"
    passed, failed = row.get("tests_passed"), row.get("tests_failed")
    if row.get("tests_total") is not None and (passed or 0) + (failed or 0) == 0:
        return f"no test passed or failed ({row.get('tests_skipped') or 0} skipped)"
    return None


def _infra(row: dict, loaded: _Loaded, signatures: tuple[Signature, ...]) -> dict | None:
    if row["outcome"] == stats.TIMED_OUT:
        sweeper = bool(row["closed_by_sweeper"])
        return {
            "rule": "timed_out",
            "closed_by_sweeper": sweeper,
            "summary": "timed out (closed by the sweeper after it stayed in progress)"
            if sweeper
            else "timed out",
        }
    if row["outcome"] == stats.CANCELLED:
        return {
            "rule": "cancelled_not_superseded",
            "summary": "cancelled, and no newer head SHA of the PR superseded it",
        }
    tests = _tests_of(loaded, row["id"])
    reason = _no_tests_ran(row, tests)
    if reason:
        return {"rule": "no_tests_ran", "summary": f"no tests ran: {reason}"}
    messages = [t["message"] for t in tests if t["message"]]
    for signature in signatures:
        matched = signature.match(row, messages)
        if matched:
            return {
                "rule": "signature",
                "signature": signature.name,
                "description": signature.description,
                "matched": matched,
                "summary": f"matches infra signature {signature.name}"
                + (f" ({signature.description})" if signature.description else ""),
            }
    return None
