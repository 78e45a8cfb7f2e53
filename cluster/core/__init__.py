"""The bottom layer: errors, base types and the ports every concept shares."""
