"""``python -m courier.run -n N [--timeout S] PROGRAM [ARGS...]``: courier-run,
the local launcher (docs/launching.md), from the installed package."""

from __future__ import annotations

import os
import sys

from . import courier_run_path


def main() -> None:
    """Replace this process with courier-run and the given arguments."""
    path = courier_run_path()
    if path is None:
        sys.stderr.write(
            "courier.run: no courier-run found (not in the package, $COURIER_RUN or PATH)\n")
        sys.exit(127)
    os.execv(path, [path] + sys.argv[1:])


if __name__ == "__main__":
    main()
