"""hud.ingestion: see docs/architecture.md."""
