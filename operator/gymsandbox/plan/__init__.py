"""Planners: pure functions from what the reconciles read to what they write. They import only the pure layers
(api/, desired/, status/, policy/, leases/); the engine (handlers/) gathers their inputs and applies their
answers."""
