"""bench/mirror.py still measures the mirror, at a small size.

Nothing else runs the bench, and when the in-process pool moved to `hud.core.taskqueue` it
went on patching the old place: its tasks ran on real threads against another connection,
no check run was written, and it printed 0 GitHub writes with every job "dropped". A broken
bench says nothing about the mirror, so the suite runs it.
"""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_mirror_bench_writes_every_check_run_once_through_refusals():
    done = subprocess.run(
        [sys.executable, "bench/mirror.py", "--prs", "3", "--jobs", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "12 jobs, 24 callbacks" in out and ", 3 gates" in out
    writes, refused = map(int, re.search(r"check-run writes: (\d+), refused (\d+)", out).groups())
    assert refused > 0 and writes > 12 + 3  # the scripted refusals happened, and were retried
    assert "per job:  creates 1.00" in out and "per gate: creates 1.00" in out
    assert "duplicated check runs: 0" in out and "dropped check runs: 0" in out
