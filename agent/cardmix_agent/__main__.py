"""`python3 cardmix-agent.pyz …` (the zipapp's entry point: `make agent`) or `python3 -m cardmix_agent …`."""
import sys

from .cli import main


def run() -> None:
    """Exit with main's status (zipapp's own generated entry point would drop it)."""
    sys.exit(main())


if __name__ == "__main__":
    run()
