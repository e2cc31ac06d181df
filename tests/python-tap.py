#!/usr/bin/env python3
"""python-tap.py JUNIT_XML FIRST: pytest's JUnit XML report as TAP points,
one per test, numbered from FIRST (tests/test-python.sh prints the plan):
a failure or error is "not ok" with its message as comments, a skip
"ok ... # SKIP reason". Prints the number of points on stderr's last line;
exits 1 when the report is missing or holds no test."""

import sys
import xml.etree.ElementTree as ET


def main():
    path, n = sys.argv[1], int(sys.argv[2])
    try:
        cases = list(ET.parse(path).getroot().iter("testcase"))
    except (OSError, ET.ParseError) as e:
        print("not ok %d - pytest wrote no report (%s)" % (n, e))
        print(1, file=sys.stderr)
        return 1
    if not cases:
        print("not ok %d - pytest ran no test" % n)
        print(1, file=sys.stderr)
        return 1
    for case in cases:
        name = "%s::%s" % (case.get("classname", "").replace("tests.", ""), case.get("name"))
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        skipped = case.find("skipped")
        if bad is not None:
            print("not ok %d - %s" % (n, name))
            for line in ((bad.get("message") or "") + "\n" + (bad.text or "")).splitlines()[-30:]:
                print("# " + line)
        elif skipped is not None:
            print("ok %d - %s # SKIP %s" % (n, name, (skipped.get("message") or "").replace(
                "\n", " ")))
        else:
            print("ok %d - %s" % (n, name))
        n += 1
    print(len(cases), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
