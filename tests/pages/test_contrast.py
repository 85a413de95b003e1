"""Every status badge meets WCAG AA (4.5:1) for its small text, computed from hud.css itself."""

import re
from pathlib import Path

import pytest

from hud.attribution import BADGES as VERDICT_BADGES
from hud.pages import GATE_BADGES, SYNC_BADGES
from hud.templatetags.hud_format import STATUSES

CSS = (Path(__file__).resolve().parents[2] / "static" / "hud" / "hud.css").read_text()
AA_NORMAL_TEXT = 4.5


def _rules(css: str) -> list[tuple[list[str], dict[str, str]]]:
    """(selectors, declarations) of every rule, comments removed."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    rules = []
    for selectors, body in re.findall(r"([^{}]+)\{([^}]*)\}", css):
        declarations = dict(
            (name.strip(), value.strip())
            for name, _, value in (d.partition(":") for d in body.split(";") if ":" in d)
        )
        rules.append(([s.strip() for s in selectors.split(",")], declarations))
    return rules


RULES = _rules(CSS)
VARIABLES = next(decl for selectors, decl in RULES if selectors == [":root"])


def _colour(value: str) -> str:
    """A declaration's colour as #rrggbb, following var(--name)."""
    match = re.fullmatch(r"var\((--[\w-]+)\)", value)
    value = VARIABLES[match.group(1)] if match else value
    value = value.lower()
    if re.fullmatch(r"#[0-9a-f]{3}", value):
        value = "#" + "".join(2 * c for c in value[1:])
    assert re.fullmatch(r"#[0-9a-f]{6}", value), value
    return value


def _luminance(colour: str) -> float:
    channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(foreground: str, background: str) -> float:
    """The WCAG 2 contrast ratio of two colours."""
    light, dark = sorted((_luminance(foreground), _luminance(background)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def _declared(selector: str, name: str) -> str | None:
    """The last value of `name` in rules listing exactly `selector` (the cascade's winner)."""
    value = None
    for selectors, declarations in RULES:
        if selector in selectors and name in declarations:
            value = declarations[name]
    return value


def badge_colours() -> dict[str, tuple[str, str]]:
    """(text, background) of every `.status-*` badge, and of each as a matrix cell."""
    classes = sorted(set(re.findall(r"\.status-(\w+)", CSS)))
    pairs = {}
    for name in classes:
        background = _declared(f".status-{name}", "background")
        foreground = _declared(f".status-{name}", "color")
        if background is None:
            continue
        pairs[name] = (_colour(foreground), _colour(background))
        cell = _declared(f".matrix td.cell.status-{name}", "color")
        if cell is not None:
            pairs[f"matrix cell {name}"] = (_colour(cell), _colour(background))
    return pairs


def test_contrast_matches_the_wcag_examples():
    assert contrast("#ffffff", "#000000") == pytest.approx(21.0)
    assert contrast("#777777", "#ffffff") == pytest.approx(4.48, abs=0.01)


def test_every_badge_the_pages_use_has_its_colours_in_the_stylesheet():
    tables = (STATUSES, VERDICT_BADGES, GATE_BADGES, SYNC_BADGES)
    used = {css for table in tables for css, *_ in table.values()}
    assert used <= set(badge_colours())


@pytest.mark.parametrize(("badge", "colours"), sorted(badge_colours().items()))
def test_badge_text_meets_aa_contrast(badge, colours):
    foreground, background = colours
    assert contrast(foreground, background) >= AA_NORMAL_TEXT, (badge, colours)
