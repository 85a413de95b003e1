"""Hypothesis profiles for the property tests of the derived layer (tests/support)."""

import tests.support.hypothesis_profiles  # noqa: F401
