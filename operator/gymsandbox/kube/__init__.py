"""The I/O foundation: API access, watches and their stores, events, the signing key's Secret, the connection.

Nothing here decides anything about GymHosts or episodes; the engine (handlers/) and the broker build on it,
and it imports only the pure layers (api/, desired/owner, leases/) and metrics.
"""
