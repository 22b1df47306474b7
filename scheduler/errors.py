"""The engine's typed errors."""


class InconsistentSnapshot(ValueError):
    """The snapshot handed to the engine contradicts itself; the message says how."""
