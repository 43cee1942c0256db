"""``./dev``, the developer entry point: what it says without setting anything up."""

import subprocess
from pathlib import Path

DEV = Path(__file__).resolve().parents[1] / "dev"


def _dev(*args):
    return subprocess.run(["bash", str(DEV), *args], capture_output=True, text=True, timeout=60)


def test_help_lists_the_commands_and_succeeds():
    for args in ((), ("help",), ("--help",)):
        done = _dev(*args)
        assert done.returncode == 0 and "./dev demo" in done.stdout and "./dev test" in done.stdout, args


def test_an_unknown_command_is_refused_with_the_help():
    """``./dev foo`` printed the help and exited 0, so a typo in a script went unnoticed."""
    done = _dev("foo")
    assert done.returncode == 2
    assert done.stderr.startswith("dev: unknown command 'foo'") and "./dev demo" in done.stderr
