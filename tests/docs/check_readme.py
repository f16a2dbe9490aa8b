#!/usr/bin/env python3
"""The README stays true: its key table is exactly what `pipetrain keys`
prints, i.e. the schema the config parser uses.

usage: check_readme.py PIPETRAIN"""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    binary = sys.argv[1]
    keys = subprocess.run([binary, "keys"], capture_output=True, text=True, check=True).stdout.strip()
    readme = open(os.path.join(ROOT, "README.md")).read()
    if keys not in readme:
        want = keys.splitlines()
        missing = [l for l in want if l not in readme]
        sys.exit("README.md's key table differs from `pipetrain keys`; lines not in the README:\n" +
                 "\n".join(missing[:10]))
    for line in keys.splitlines()[2:]:
        key = line.split("`")[1]
        if not key.count("."):
            sys.exit("odd key %r" % key)
    print("README key table matches `pipetrain keys` (%d keys)" % (len(keys.splitlines()) - 2))


if __name__ == "__main__":
    main()
