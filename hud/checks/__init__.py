"""hud.checks: see docs/architecture.md."""
