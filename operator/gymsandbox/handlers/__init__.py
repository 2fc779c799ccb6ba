"""The only place with @kopf decorators. Importing this package registers every handler."""

from gymsandbox.handlers import episode, episode_watches, gymhost

__all__ = ["episode", "episode_watches", "gymhost"]
