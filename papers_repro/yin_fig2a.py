"""[Yin] Fig. 2(a). Same as `speculab repro yin-fig2a`; the logic lives in speculab.repro."""

import sys

from speculab.cli import main

if __name__ == "__main__":
    sys.exit(main(["repro", "yin-fig2a", *sys.argv[1:]]))
