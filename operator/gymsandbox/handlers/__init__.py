"""The engine (handlers/engine.py) and what it runs: the GymHost and EpisodeSandbox handlers."""
