"""Draft design by differentiable theory. Same as `speculab repro draft-design`; the logic lives in speculab.repro."""

import sys

from speculab.cli import main

if __name__ == "__main__":
    sys.exit(main(["repro", "draft-design", *sys.argv[1:]]))
