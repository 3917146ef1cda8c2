"""Small helpers shared by every console script."""

from __future__ import annotations

import sys


def not_yet(program: str, issue_hint: str) -> int:
    """Explain that a program has only its command-line surface so far, and fail."""
    sys.stderr.write(
        f"{program}: this build only provides --help; the program itself is not implemented yet "
        f"({issue_hint}).\n"
    )
    return 2
