"""Input: bytes from files, pipes and followed logs into numbered lines and log records."""
