"""Pure condition computation from observed state."""
