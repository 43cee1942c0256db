"""[Yin] Fig. 2b. Same as `speculab repro yin-fig2b`; the logic lives in speculab.repro."""

import sys

from speculab.cli import main

if __name__ == "__main__":
    sys.exit(main(["repro", "yin-fig2b", *sys.argv[1:]]))
