"""gymsandbox: a Kubernetes operator for isolated RL / agent-evaluation environments."""

__version__ = "0.1.0"
