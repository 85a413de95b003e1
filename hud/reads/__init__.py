"""hud.reads: see docs/architecture.md."""
