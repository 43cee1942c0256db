"""[FSD] §4.2 sequence-level bound. Same as `speculab repro fsd-bound`; the logic lives in speculab.repro."""

import sys

from speculab.cli import main

if __name__ == "__main__":
    sys.exit(main(["repro", "fsd-bound", *sys.argv[1:]]))
