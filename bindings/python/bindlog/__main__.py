"""``python -m bindlog`` and the ``bindlog`` console script: the CLI
(tools/ of the repository, built into the package as ``bindlog/bin/bindlog``
next to the library it links).  ``BINDLOG_CLI`` names another build of it
(a source checkout has none in the package).  The process is replaced by
the CLI (``exec``), so its exit status and signals are the CLI's own."""
from __future__ import annotations

import os
import sys
from typing import List, Optional

#: the CLI built into the package
PACKAGE_CLI = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "bindlog")


def cli_path() -> Optional[str]:
    """The CLI this package runs, or None when there is none."""
    exe = os.environ.get("BINDLOG_CLI") or PACKAGE_CLI
    return exe if os.access(exe, os.X_OK) else None


def main(argv: Optional[List[str]] = None) -> int:
    """Run the CLI with `argv` (default: this process's arguments)."""
    args = sys.argv[1:] if argv is None else list(argv)
    exe = cli_path()
    if exe is None:
        sys.stderr.write(
            f"bindlog: the CLI is not in this package ({PACKAGE_CLI} is missing): install the "
            "package with pip (it builds the CLI), or set BINDLOG_CLI to a built tools/bindlog\n"
        )
        return 3
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, [exe] + args)
    return 3  # (not reached)


if __name__ == "__main__":
    sys.exit(main())
