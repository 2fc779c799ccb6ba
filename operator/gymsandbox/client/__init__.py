"""Evaluator SDK: wait for a GymHost and read why it failed."""

from gymsandbox.client.gymhost import GymHostFailedError, GymHostTimeoutError, wait_ready

__all__ = ["GymHostFailedError", "GymHostTimeoutError", "wait_ready"]
