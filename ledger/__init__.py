"""The run ledger: one Redis stream of events per turn, and the pure reads over it.

Depends on redis and pydantic only; never imports ``worker``, ``tasks`` or celery.
"""
