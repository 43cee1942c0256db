"""Batch optimality (SPEC O). Same as `speculab repro batch-optimality`; the logic lives in speculab.repro."""

import sys

from speculab.cli import main

if __name__ == "__main__":
    sys.exit(main(["repro", "batch-optimality", *sys.argv[1:]]))
