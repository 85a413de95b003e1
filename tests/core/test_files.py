"""hud.core.files: a configuration file parsed once per process and file version."""

import os

import pytest

from hud.attribution import infra
from hud.core import files


def _touch_later(path) -> None:
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


def test_a_file_is_parsed_again_only_when_it_changes(tmp_path):
    path = tmp_path / "conf.txt"
    path.write_text("one")
    reads = []

    def parse(p):
        reads.append(p)
        return p.read_text()

    assert {files.parsed(path, parse) for _ in range(20)} == {"one"}
    assert len(reads) == 1
    path.write_text("two")
    _touch_later(path)
    assert files.parsed(path, parse) == "two"
    assert len(reads) == 2


def test_a_file_that_fails_to_parse_is_reported_on_every_call(tmp_path):
    path = tmp_path / "signatures.yml"
    path.write_text("signatures: [{name: x}]\n")
    for _ in range(2):
        with pytest.raises(ValueError, match="give at least one of"):
            infra.load_signatures(path)
    path.write_text("signatures: [{name: x, message: lost}]\n")
    _touch_later(path)
    assert [s.name for s in infra.load_signatures(path)] == ["x"]
