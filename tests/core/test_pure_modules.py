"""The pure modules import no ORM (import-linter checks hud.models; this checks django.db)."""

import ast
from pathlib import Path

import pytest

HUD = Path(__file__).resolve().parents[2] / "hud"
# hud.core.taskqueue hands work over on transaction.on_commit: the one allowed django.db use.
PURE = [
    *sorted(p for p in (HUD / "core").glob("*.py") if p.name != "taskqueue.py"),
    *sorted((HUD / "stats").glob("*.py")),
    HUD / "gates" / "__init__.py",
    *sorted((HUD / "github").glob("*.py")),
    HUD / "pages" / "charts.py",
]


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at any depth (function bodies included)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", PURE, ids=lambda p: str(p.relative_to(HUD)))
def test_pure_module_imports_no_orm(path):
    orm = {m for m in imported_modules(path) if m == "django.db" or m.startswith("django.db.")}
    assert orm == set()
