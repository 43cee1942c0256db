"""Is my verifier lossless? Same as `speculab repro verifiers`; the logic lives in speculab.repro."""

import sys

from speculab.cli import main

if __name__ == "__main__":
    sys.exit(main(["repro", "verifiers", *sys.argv[1:]]))
