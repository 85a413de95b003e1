"""Static files storage that also works before `collectstatic` has run."""

from whitenoise.storage import CompressedManifestStaticFilesStorage


class StaticStorage(CompressedManifestStaticFilesStorage):
    """Hashed, compressed names after collectstatic; plain names (served by finders) before.

    Pages must work right after `migrate` with DEBUG off, so a missing manifest falls back to
    the unhashed file name instead of raising.
    """

    manifest_strict = False

    def stored_name(self, name: str) -> str:
        """The hashed name from the manifest, or the plain name if the file is not collected."""
        try:
            return super().stored_name(name)
        except ValueError:
            # Not under STATIC_ROOT yet: whitenoise serves it from the finders by this name.
            return name
