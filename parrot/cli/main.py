"""`parrot`: the umbrella command.

    parrot --version | --help
    parrot serve ARGS...    (= parrot-serve ARGS...)
    parrot engine ARGS...   (= parrot-engine ARGS...)
    parrot bench ARGS...    (= parrot-bench ARGS...)
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

import parrot

COMMANDS = {"serve": "parrot.cli.serve", "engine": "parrot.cli.engine",
            "bench": "parrot.cli.bench"}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--version"]:
        print(f"parrot-serve {parrot.__version__}")
        return 0
    if args[:1] in (["--help"], ["-h"]):  # asked for: stdout and success, as argparse does
        print(__doc__.strip())
        return 0
    if not args or args[0] not in COMMANDS:
        print(__doc__.strip(), file=sys.stderr if args else sys.stdout)
        return 2 if args else 0
    module = importlib.import_module(COMMANDS[args[0]])
    sys.argv[0] = f"parrot {args[0]}"
    result = module.main(args[1:])
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
