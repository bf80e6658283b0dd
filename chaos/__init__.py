"""Fault injection (``make chaos``): crash a real worker at chosen points, check invariants."""
