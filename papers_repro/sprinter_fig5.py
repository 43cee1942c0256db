"""[SPR] Fig. 5. Same as `speculab repro sprinter-fig5`; the logic lives in speculab.repro."""

import sys

from speculab.cli import main

if __name__ == "__main__":
    sys.exit(main(["repro", "sprinter-fig5", *sys.argv[1:]]))
