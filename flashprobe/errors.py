"""The one exception type users see as a one-line message (the CLI maps it to exit code 2)."""


class FlashprobeError(ValueError):
    """Bad input: an unknown field, an impossible value, a missing file, a GPU-only option on CPU.

    The message is a single line naming the problem; the CLI prints it and exits with code 2.
    """
