"""Evaluator SDK: wait for a GymHost and read why it failed; drive episodes through the broker."""

from gymsandbox.client.broker import BrokerClient, BrokerClientError
from gymsandbox.client.gymhost import GymHostFailedError, GymHostTimeoutError, wait_ready

__all__ = ["BrokerClient", "BrokerClientError", "GymHostFailedError", "GymHostTimeoutError", "wait_ready"]
