"""hud.core: see docs/architecture.md."""
