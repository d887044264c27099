"""A unittest result that prints TAP ("ok N - name", "not ok N - name"), so
meson's TAP protocol and scripts/count_tests.py count every test case."""

import sys
import traceback
import unittest


class TapResult(unittest.TestResult):
    def __init__(self, stream=sys.stdout):
        super().__init__()
        self.stream = stream
        self.n = 0

    def _line(self, ok, test, extra=""):
        self.n += 1
        self.stream.write(f"{'ok' if ok else 'not ok'} {self.n} - {test.id()}{extra}\n")
        self.stream.flush()

    def _diag(self, err):
        for line in "".join(traceback.format_exception(*err)).splitlines():
            self.stream.write(f"# {line}\n")

    def addSuccess(self, test):
        super().addSuccess(test)
        self._line(True, test)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._line(False, test)
        self._diag(err)

    def addError(self, test, err):
        super().addError(test, err)
        self._line(False, test)
        self._diag(err)

    def addSubTest(self, test, subtest, err):
        # Failing subtests get their own line; a test whose subtests all pass
        # reports once through addSuccess.
        super().addSubTest(test, subtest, err)
        if err is not None:
            self._line(False, subtest)
            self._diag(err)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._line(True, test, f" # SKIP {reason}")

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._line(True, test)

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._line(False, test, " (unexpected success)")
