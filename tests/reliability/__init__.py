"""Hostile and fault tests of issue 9: replay, PostgreSQL stopped mid-load, attacks."""
