"""The run directory on shared storage: atomic JSON files, locks, node records."""
