"""The ground floor: the one settings object, the clock and ids, errors, logging, failpoints,
metrics, and the tracing hooks (``tracing``: the protocol the floors above call, ``OFF`` unless the
edges wire the SDK).

May import: ``ledger`` and the standard library and third-party packages. Nothing else of
``worker``: every other floor stands on this one.
"""
