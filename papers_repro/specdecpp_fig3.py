"""[SDpp] Fig. 3. Same as `speculab repro specdecpp-fig3`; the logic lives in speculab.repro."""

import sys

from speculab.cli import main

if __name__ == "__main__":
    sys.exit(main(["repro", "specdecpp-fig3", *sys.argv[1:]]))
