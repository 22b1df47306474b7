"""`python -m scheduler.simulate FILE.json`: print a scenario's result as JSON.

Exit status 0 on success, 2 on an invalid file (one line on stderr naming the path).
"""

from __future__ import annotations

import json
import sys

from . import ScenarioError, run_scenario


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print("usage: python -m scheduler.simulate FILE.json", file=sys.stderr)
        return 2
    path = argv[0]
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle)
    except OSError as error:
        print(f"error: cannot read {path}: {error.strerror}", file=sys.stderr)
        return 2
    except json.JSONDecodeError as error:
        print(f"error: {path} is not valid JSON: {error.msg} at line {error.lineno}",
              file=sys.stderr)
        return 2
    try:
        result = run_scenario(document)
    except ScenarioError as error:
        print(f"error: {path}: {error}", file=sys.stderr)
        return 2
    json.dump(result, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
