"""Elapsed time as every line a person reads shows it (the controller's status line, a
run's wall time, a report's drawing), so that one wait reads the same wherever it is said."""
from __future__ import annotations


def duration(seconds: float, hours: bool = False) -> str:
    """e.g. '0:42', '12:05', '3:07:00'; with `hours`, '0:12:05': a time set beside a limit
    in hours (a run's wall time 'of 2 h') must not read as hours and minutes."""
    m, s = divmod(int(max(0.0, seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h or hours else f"{m}:{s:02d}"
