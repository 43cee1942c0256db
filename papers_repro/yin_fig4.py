"""[Yin] Fig. 4. Same as `speculab repro yin-fig4`; the logic lives in speculab.repro."""

import sys

from speculab.cli import main

if __name__ == "__main__":
    sys.exit(main(["repro", "yin-fig4", *sys.argv[1:]]))
