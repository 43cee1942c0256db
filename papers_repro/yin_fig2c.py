"""[Yin] Fig. 2c. Same as `speculab repro yin-fig2c`; the logic lives in speculab.repro."""

import sys

from speculab.cli import main

if __name__ == "__main__":
    sys.exit(main(["repro", "yin-fig2c", *sys.argv[1:]]))
