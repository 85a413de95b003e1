"""requirements.lock is what `make` installs: it must hold every pin of requirements*.txt, each
with its hashes, so the files people edit and the one installed never disagree."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")


def _name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(path: Path) -> dict[str, str]:
    """Package → version of every `name==version` line of a requirements file (no includes)."""
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = _PIN.match(line.strip())
        if match:
            pins[_name(match.group(1))] = match.group(2)
    return pins


def _locked() -> dict[str, tuple[str, int]]:
    """Package → (version, number of hashes) in requirements.lock."""
    locked: dict[str, tuple[str, int]] = {}
    current = None
    for line in (ROOT / "requirements.lock").read_text(encoding="utf-8").splitlines():
        match = _PIN.match(line)
        if match:
            current = _name(match.group(1))
            locked[current] = (match.group(2), 0)
        elif current and line.strip().startswith("--hash=sha256:"):
            version, hashes = locked[current]
            locked[current] = (version, hashes + 1)
    return locked


def test_every_pin_is_locked_at_its_version():
    locked = _locked()
    for file in ("requirements.txt", "requirements-dev.txt"):
        for name, version in _pins(ROOT / file).items():
            assert name in locked, f"{name} of {file} is not in requirements.lock: run make lock"
            assert locked[name][0] == version, (
                f"{name}: {file} says {version}, the lock {locked[name][0]}: run make lock"
            )


def test_every_locked_package_has_a_hash():
    locked = _locked()
    assert len(locked) > len(_pins(ROOT / "requirements.txt"))  # the transitive ones too
    assert [name for name, (_, hashes) in locked.items() if hashes == 0] == []
