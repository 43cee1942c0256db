"""Token trees vs chains on a Markov instance. Same as `speculab repro tree-gain`; the logic lives in speculab.repro."""

import sys

from speculab.cli import main

if __name__ == "__main__":
    sys.exit(main(["repro", "tree-gain", *sys.argv[1:]]))
