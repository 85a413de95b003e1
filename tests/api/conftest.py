"""Fixtures shared by the ingestion endpoint tests."""

import pytest

from hud.models import Level
from tests.support import builders


@pytest.fixture
def backend(frozen_clock):
    """An L2 backend named like the tokens' repository claim (org/repo)."""
    return builders.downstream("org/repo", Level.L2)
