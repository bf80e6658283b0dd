"""The dres worker: settings, tools, models, the agent loop, the Celery app, API and CLI."""
