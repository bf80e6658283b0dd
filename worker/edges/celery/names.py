"""The chunk task's registered names, per mode: dispatch goes by name, so ``worker`` never
imports ``tasks`` (``tasks.chunks`` registers the functions under these names)."""

CHUNK_TASK = "dres.run_chunk"
CHUNK_TASK_BACKGROUND = "dres.run_chunk_background"
CHUNK_TASKS = (CHUNK_TASK, CHUNK_TASK_BACKGROUND)


def chunk_task(mode: str) -> str:
    return CHUNK_TASK_BACKGROUND if mode == "background" else CHUNK_TASK
