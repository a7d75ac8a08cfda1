"""python -m weightsync.info: what this build of weightsync can do here.

The Python twin of the ``weightsync-info`` tool: the library version, every
data transport built in (in negotiation order) and whether it is viable on
this machine (and if not, why), CUDA support, and every setting in force
(WEIGHTSYNC_* environment variables) with where it came from. ``--json`` for
a machine-readable report. Exits 1 if a setting is malformed.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict, List, Optional

from . import _weightsync


def report() -> Dict[str, Any]:
    """The report as a dict: version, transports, cuda, settings, python."""
    import os

    return {
        "version": _weightsync.version(),
        "transports": _weightsync.transports(),
        "cuda": _weightsync.cuda_info(),
        "settings": _weightsync.settings(),
        "python": {"executable": sys.executable, "version": sys.version.split()[0],
                   "package": os.path.dirname(os.path.abspath(__file__))},
    }


def _table(r: Dict[str, Any]) -> str:
    lines: List[str] = [f"# weightsync {r['version']} (Python {r['python']['version']}, {r['python']['package']})",
                        "#", "# Data transports (negotiation order: best first)"]
    for t in r["transports"]:
        state = "viable" if t["viable"] else f"not viable: {t['reason']}"
        lines.append(f"  {t['name']:<9} {state}")
        lines.append(f"            {t['description']}")
    c = r["cuda"]
    lines.append("#\n# CUDA")
    if c["usable"]:
        lines.append(f"  usable: {c['devices']} device(s), {c['device']}")
    else:
        lines.append(f"  {'built in' if c['built'] else 'not built in'}; not usable: {c['reason']}")
    lines.append("#\n# Settings (option > environment > default)")
    for s in r["settings"]:
        extra = f"  ERROR: {s['error']}" if s["error"] else ""
        lines.append(f"  {s['name']:<24} {s['value']:<22} ({s['source']}, {s['environment']}){extra}")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m weightsync.info",
        description="Show the weightsync version, which data transports are built in and viable on this "
                    "machine, and the settings in force (WEIGHTSYNC_* environment variables).")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    r = report()
    print(json.dumps(r, indent=2) if args.json else _table(r))
    return 1 if any(s["error"] for s in r["settings"]) else 0


if __name__ == "__main__":
    sys.exit(main())
