"""hud.pages: see docs/architecture.md."""
