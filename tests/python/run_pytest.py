#!/usr/bin/env python3
"""Runs one pytest file for ctest and maps the outcome to ctest's codes.

  run_pytest.py FILE [pytest arguments...]

Exit 0 when every test passed, 77 (ctest's SKIP_RETURN_CODE) with a
"SKIPPED: reason" line when pytest or torch is missing or every test was
skipped, and pytest's own code otherwise. PYTHONPATH must name the built
package (<build>/python); ctest sets it.
"""

import os
import sys


def main() -> int:
    if len(sys.argv) < 2:
        print("usage: run_pytest.py FILE [pytest arguments...]", file=sys.stderr)
        return 2
    try:
        import pytest
    except ImportError:
        print("SKIPPED: pytest is not installed (apt-get install python3-pytest)")
        return 77

    class Outcomes:
        def __init__(self):
            self.passed = self.failed = self.skipped = 0
            self.reasons = set()

        def pytest_runtest_logreport(self, report):
            if report.skipped:
                if report.when in ("setup", "call"):
                    self.skipped += 1
                    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
                    self.reasons.add(reason.replace("Skipped: ", ""))
            elif report.failed:
                self.failed += 1
            elif report.when == "call":
                self.passed += 1

        def pytest_collectreport(self, report):
            if report.skipped:
                self.skipped += 1
                reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
                self.reasons.add(reason.replace("Skipped: ", ""))

    outcomes = Outcomes()
    args = [sys.argv[1], "-q", "-rs", "-p", "no:cacheprovider"]
    code = pytest.main(args + sys.argv[2:], plugins=[outcomes])
    why = f" ({'; '.join(sorted(outcomes.reasons))})" if outcomes.skipped else ""
    print(f"pytest: {outcomes.passed} passed, {outcomes.failed} failed, {outcomes.skipped} skipped{why}")
    if code == 0 and outcomes.passed == 0 and outcomes.skipped > 0:
        print("SKIPPED: " + "; ".join(sorted(outcomes.reasons)))
        return 77
    if code == 5:  # nothing collected
        print("no tests were collected from " + sys.argv[1])
        return 1
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
