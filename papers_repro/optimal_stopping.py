"""Optimal stopping ([SDpp] Fig. 3 with the optimum). Same as `speculab repro optimal-stopping`; the logic lives in
speculab.repro."""

import sys

from speculab.cli import main

if __name__ == "__main__":
    sys.exit(main(["repro", "optimal-stopping", *sys.argv[1:]]))
