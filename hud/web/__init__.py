"""hud.web: see docs/architecture.md."""
