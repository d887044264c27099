#!/usr/bin/env python3
"""Every test has a timeout with room on a loaded 2-core machine.

usage: check_timeouts.py [--durations] BUILDDIR

Reads meson's introspection (BUILDDIR/meson-info/intro-tests.json) and fails
when a test's timeout is below FLOOR seconds (meson's default of 30 s killed
traces_synth under ASan with two tests at a time). With --durations (after a
full run, e.g. in both CI build folders) also when the recorded run
(BUILDDIR/meson-logs/testlog.json) took more than a third of a timeout: a
test that close to its limit fails on a busier machine. The meson test runs
without it: the log is being written while it runs.
Python 3, standard library only.
"""
import json
import os
import sys

FLOOR = 60
ROOM = 3.0


def main(argv):
    args = argv[1:]
    durations = "--durations" in args
    args = [a for a in args if a != "--durations"]
    if len(args) != 1:
        sys.stderr.write(__doc__)
        return 2
    build = args[0]
    with open(os.path.join(build, "meson-info", "intro-tests.json"), encoding="utf-8") as f:
        tests = json.load(f)
    last = {}
    log = os.path.join(build, "meson-logs", "testlog.json")
    if durations and os.path.exists(log):
        with open(log, encoding="utf-8") as f:
            for line in f:
                try:
                    d = json.loads(line)
                except ValueError:
                    continue
                last[d.get("name", "")] = d.get("duration", 0.0)
    errors = []
    for t in tests:
        name = "%s / %s" % ("+".join(t.get("suite", [])) or "-", t["name"])
        timeout = t.get("timeout", 30)
        if timeout <= 0:
            continue  # no limit asked for: meson's own
        if timeout < FLOOR:
            errors.append("%s: timeout %s s < %d s" % (name, timeout, FLOOR))
        for key, dur in last.items():
            if key.endswith(" / " + t["name"]) and dur * ROOM > timeout:
                errors.append("%s: last run %.1f s, timeout %s s (want >= %.0fx)"
                              % (name, dur, timeout, ROOM))
    for e in errors:
        print(e)
    print("%d tests, %d without room" % (len(tests), len(errors)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
