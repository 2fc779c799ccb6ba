"""Adapters that let other frameworks use gymsandbox episodes (each imports its framework on load)."""
