"""The ground floor: the one settings object, the clock and ids, errors, logging, failpoints.

May import: ``ledger`` and the standard library and third-party packages. Nothing else of
``worker``: every other floor stands on this one.
"""
