"""The episode broker: the authenticated HTTP front door through which untrusted Gym hosts manage episodes."""
