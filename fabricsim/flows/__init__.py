"""Engine-neutral flow layer."""
