"""The only place with @kopf decorators. Importing this package registers every handler."""

from gymsandbox.handlers import episode, gymhost, watches

__all__ = ["episode", "gymhost", "watches"]
