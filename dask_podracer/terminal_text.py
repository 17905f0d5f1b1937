"""Text from elsewhere (a segment's error, a library's coloured message) made safe to print on one line.

Imports nothing of ours: `progress.py`, `status.py` and the CLI use it, and `status.py` sits below `population/`
(`run_lease` reads it), so it may not reach the progress printer, whose types come from `population/`.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` with its control characters written as escapes (`\\x1b`): one line, and no terminal commands."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)
