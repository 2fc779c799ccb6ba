"""The only place with @kopf decorators. Importing this package registers every handler."""

from gymsandbox.handlers import gymhost

__all__ = ["gymhost"]
