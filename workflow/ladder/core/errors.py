"""One exception type whose message is the single line a user sees."""


class LadderError(Exception):
    """A bad input or an unmet requirement; the message names the key, file or value at fault."""
