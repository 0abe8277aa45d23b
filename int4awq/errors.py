"""The one error type for bad input: the command line prints its message and exits 2."""


class ConfigError(ValueError):
    """A shape, option, file or value the program cannot accept; the message says which rule failed."""
