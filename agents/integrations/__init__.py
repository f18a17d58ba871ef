"""Adapters between kvmemory and the agent frameworks people already run.

* :mod:`agents.integrations.smolagents`: record a smolagents agent's memory
  in a kvmemory session as it changes, restore it into a new agent, and read
  a dump of smolagents' ``get_full_steps()`` (extra ``kvmemory[smolagents]``).
* :mod:`agents.integrations.langgraph`: LangGraph's long-term memory store
  (``KVMemoryStore``, a ``BaseStore``) kept in a kvmemory store, one session
  per namespace (extra ``kvmemory[langgraph]``).
* :mod:`agents.integrations.ufo`: turn a UFO 2 or UFO 3 run's log folder
  into a session, and read UFO's configuration for the switch-over files of
  ``docs/ufo.md``.
* :mod:`agents.integrations.mcp`: serve a store to any agent over the Model
  Context Protocol (extra ``kvmemory[mcp]``; ``kvmemory mcp`` on the command line).
* :mod:`agents.integrations.web`: watch a store's sessions live in the
  browser, read-only (extra ``kvmemory[serve]``; ``kvmemory serve``).

Each adapter imports its framework only when it is used, and names the extra
to install when the framework is missing.
"""
