"""[SPR] Fig. 1 / Table 2 analogue: SPRINTER decoding with a trained verifier. Same as `speculab repro
sprinter-tradeoff`.

Any pair: `python papers_repro/sprinter_tradeoff.py --draft PATH_OR_NAME --target PATH_OR_NAME`.
"""

import sys

from speculab.cli import main

if __name__ == "__main__":
    sys.exit(main(["repro", "sprinter-tradeoff", *sys.argv[1:]]))
