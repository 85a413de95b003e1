"""hud.ops: see docs/architecture.md."""
