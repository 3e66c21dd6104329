"""The pure search core: node model, scoring and selection over a tree snapshot (no I/O)."""
