"""Operations: deployment settings, retention, metrics, logs, renames and rebuildable caches."""
