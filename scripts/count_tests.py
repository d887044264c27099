#!/usr/bin/env python3
"""Counts results in meson testlog.json files and prints 'N passed, N failed'.

TAP tests count each 'ok'/'not ok' line (a check test case); other tests
count once by their result. A TAP test that failed without reporting a
failing case (crash, timeout) counts one failure. Exit 1 if anything failed.
"""
import json
import re
import sys

passed = failed = skipped = 0
for path in sys.argv[1:]:
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as e:
        print(f"count_tests: {path}: {e}", file=sys.stderr)
        failed += 1
        continue
    for line in lines:
        if not line.strip():
            continue
        t = json.loads(line)
        result = t.get("result", "")
        out = t.get("stdout") or ""
        oks = len(re.findall(r"^ok \d+", out, re.M))
        skips = len(re.findall(r"^ok \d+.*# ?SKIP", out, re.M | re.I))
        bads = len(re.findall(r"^not ok \d+", out, re.M))
        if oks + bads:
            passed += oks - skips
            skipped += skips
            failed += bads
            if result not in ("OK", "EXPECTEDFAIL", "SKIP") and bads == 0:
                failed += 1
        elif result in ("OK", "EXPECTEDFAIL"):
            passed += 1
        elif result == "SKIP":
            skipped += 1
        else:
            failed += 1
line = f"{passed} passed, {failed} failed"
if skipped:
    line += f", {skipped} skipped"
print(line)
sys.exit(1 if failed else 0)
