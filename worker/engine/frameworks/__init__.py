"""Agents from other frameworks (docs/loops.md): a turn whose loop is ``pydantic_ai:…`` or
``openai_agents:…`` runs that framework's agent as its author wrote it, and dres sits at the
framework's own extension points — its model (each call recorded, streamed, traced) and its tools
(each call through dres's executor: both layers, the guard, approvals).

- ``base``      what an adapter is and what dres hands its run (``Hooks``)
- ``bridge``    the framework's coroutine on the process's event loop, the chunk's thread serving
                what it asks of dres (so interrupts, the guard and Redis stay where they are)
- ``steps``     the chunk's side: a framework run in place of dres's own model -> tools steps
- ``loops``     ``DRES_LOOP``'s entries: parsed, and their agents loaded (one line when not)
- ``pydantic_ai_loop``, ``openai_agents_loop``: one adapter per framework, the only modules
  that import a framework (each lazily, when a loop names it); every version assumption of a
  framework is named in its adapter's ``ASSUMES`` with a tripwire test

May import: ``ledger``, ``worker.base``, the rest of ``worker.engine``.
"""
