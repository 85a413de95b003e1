"""URL path converters whose values are valid where they land (columns, templates, reverse)."""

from django.urls import register_converter


class PullRequestNumberConverter:
    """A PR number: ASCII digits that fit the 64-bit column (longer ones are a 404, not a 500)."""

    regex = "[0-9]{1,18}"

    def to_python(self, value: str) -> int:
        """The number."""
        return int(value)

    def to_url(self, value: int) -> str:
        """The number as digits."""
        return str(value)


class TestIdConverter:
    """A failed test's id, slashes and any stored character (newlines included) allowed."""

    regex = r"[\s\S]+"

    def to_python(self, value: str) -> str:
        """The id as stored."""
        return value

    def to_url(self, value: str) -> str:
        """The id; `reverse` percent-encodes what a URL cannot carry."""
        return value


def register() -> None:
    """Make `<pr:…>` and `<test_id:…>` available to every URL list (config.urls calls it)."""
    register_converter(PullRequestNumberConverter, "pr")
    register_converter(TestIdConverter, "test_id")
