"""Thin Celery task adapters: claim a run, run a chunk through ``worker``, chain the next one."""
