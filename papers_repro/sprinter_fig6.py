"""[SPR] Fig. 6. Same as `speculab repro sprinter-fig6`; the logic lives in speculab.repro."""

import sys

from speculab.cli import main

if __name__ == "__main__":
    sys.exit(main(["repro", "sprinter-fig6", *sys.argv[1:]]))
