"""Block verification vs token verification. Same as `speculab repro block-gain`; the logic lives in speculab.repro."""

import sys

from speculab.cli import main

if __name__ == "__main__":
    sys.exit(main(["repro", "block-gain", *sys.argv[1:]]))
