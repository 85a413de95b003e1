"""Static files storage that also works before `collectstatic` has run."""

from whitenoise.storage import CompressedManifestStaticFilesStorage


class StaticStorage(CompressedManifestStaticFilesStorage):
    """Hashed, compressed names after collectstatic; plain names (served by finders) before.

    Pages must work right after `migrate` with DEBUG off, so a missing manifest falls back to
    the unhashed file name instead of raising.
    """

    manifest_strict = False
