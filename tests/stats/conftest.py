"""Hypothesis profiles for the property tests of hud.stats (tests/support)."""

import tests.support.hypothesis_profiles  # noqa: F401
