"""Text copied to GitHub made inert, and times as GitHub wants them.

Anything a downstream report or the allowlist supplies (job and test names, failure messages,
repository names) goes through `neutralise` before it reaches a check run or a comment, and a
run URL is linked only when it is the verified repository's own Actions run.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from hud.core.payload import workflow_url_pattern
from hud.models import Downstream

TEXT_CHARS = 300
MESSAGE_CHARS = 200
ZWJ = "\u200d"
# Markdown punctuation that could start emphasis, code, links, images, tables or headings.
_MARKDOWN_RE = re.compile(r"([\\`*_{}\[\]()!#|~])")
_SCHEME_RE = re.compile(r"(?i)\b([a-z][a-z0-9+.-]{1,20}):(?=//)")
_WWW_RE = re.compile(r"(?i)\bwww\.")


def _iso(moment: dt.datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def neutralise(text: Any, limit: int = TEXT_CHARS) -> str:
    """Copied text made inert for GitHub markdown: no mentions, references, HTML or links.

    One line; HTML escaped; markdown punctuation backslash-escaped (no links, images, code or
    emphasis); a zero-width joiner after `@` and `#` (no mentions, no issue references) and
    inside `scheme://` and `www.` (no autolinks).
    """
    flat = " ".join(str(text if text is not None else "").split())
    flat = "".join(ch for ch in flat if ch.isprintable())
    if len(flat) > limit:
        flat = flat[: max(limit - 1, 0)] + "…"
    flat = flat.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    flat = _MARKDOWN_RE.sub(r"\\\1", flat)
    flat = flat.replace("@", "@" + ZWJ).replace("#", "#" + ZWJ)
    flat = _SCHEME_RE.sub(lambda m: m.group(1) + ZWJ + ":", flat)
    return _WWW_RE.sub(lambda m: m.group(0)[:3] + ZWJ + ".", flat)


def _safe_run_url(downstream: Downstream, url: str) -> str | None:
    """The downstream run URL, only when it is the verified repository's own Actions run."""
    return url if url and workflow_url_pattern(downstream.full_name).match(url) else None
