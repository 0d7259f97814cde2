"""Fixture loading shared by the readiness tests."""

from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"


def load(name: str) -> str:
    """A fixture as text; undecodable bytes (garbage.txt) become U+FFFD like a log collector would."""
    return (FIXTURES / name).read_text(encoding="utf-8", errors="replace")


def all_fixtures() -> list[str]:
    """Every fixture's file name."""
    return sorted(p.name for p in FIXTURES.glob("*.txt"))
