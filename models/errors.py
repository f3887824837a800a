"""The one exception type for errors a user can cause (bad corpus row, bad request, bad bundle)."""


class XtagError(ValueError):
    """A user-facing error whose message names the file/line, field or bundle at fault."""
