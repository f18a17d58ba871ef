"""smolagents in and out: record an agent's memory in kvmemory, and restore it into a new agent.

smolagents keeps an agent's memory in RAM (``agent.memory``: a system prompt
and a list of ``TaskStep``, ``ActionStep`` and ``PlanningStep`` objects), so
it is lost when the process ends. :class:`SmolagentsRecorder` writes every
step to a kvmemory ``Memory`` (a stored one, from ``open_memory``, makes it
durable) as it reaches ``agent.memory``, after the step's other callbacks,
and writes later changes to steps it wrote (a callback that clears older
screenshots). :meth:`SmolagentsRecorder.restore` rebuilds
``agent.memory``, ``agent.task`` and a ``CodeAgent``'s Python variables in a
new agent from it, so that ``agent.run(next_task, reset=False)`` continues
where the old process stopped and ``agent.replay()`` shows the whole run.

Each step is one item with ``kind`` (``"system_prompt"``, ``"task"``,
``"planning"`` or ``"action"``), ``run`` (counts the agent's memory resets)
and the step's fields under their smolagents names, except that an action
step's ``step_number`` is the memory's step key. Values are kept losslessly:

* images (``task_images``, ``observations_images``, image parts of chat
  messages) as PNG bytes where PNG gives them back exactly (modes ``1``,
  ``L``, ``LA``, ``RGB``, ``RGBA``, ``I;16``); any other image (CMYK,
  32-bit float ``F``, ``I``, ``I;16B``, palette images, an image with a
  transparency entry) as its raw pixels with mode, size, palette and
  transparency (``{"mode", "size", "pixels", ...}``, the pixels
  zlib-compressed), rebuilt with ``Image.frombytes``: every image comes
  back with its mode and pixels;
* errors as ``{"type": "AgentToolExecutionError", "message": ...}``;
* timing as ``{"start_time", "end_time"}``, token usage as
  ``{"input_tokens", "output_tokens"}``;
* chat messages (model input and output) as ``{"role", "content",
  "tool_calls", "raw", "token_usage"}``; tool calls, there and in
  ``tool_calls``, in smolagents' shape ``{"id", "type", "function":
  {"name", "arguments"}}``.

Any other field that holds a PIL image (a code agent's ``action_output``)
is stored as PNG bytes (converted to the nearest mode PNG holds) and read
back as those bytes; any other value is kept if the codec can write it. A value it cannot write is left out and
named, with its type, in the item's ``left_out`` field (an
:class:`UnsavedValueWarning` says so): recording never stops the run.

A ``CodeAgent``'s action items also carry the Python variables the step
changed (``python_state``), removed (``python_state_removed``) or could not
save (``python_state_left_out``); :func:`restore_python_state` replays them.

Stored rows are untrusted input (another process or machine may have
written them): restoring checks the shape of every field it reads, decodes
image bytes only when they are PNG (the one file format the recorder
writes; an EPS file would make Pillow run Ghostscript), checks a raw
record's size against its mode and its number of bytes before
``Image.frombytes`` sees them, decodes only up to
``PIL.Image.MAX_IMAGE_PIXELS`` pixels, and raises ``CorruptSessionError``
naming the item and field of anything else, leaving the agent as it was.

Restored errors are instances of the smolagents error class of that name
(``AgentError`` for a class smolagents does not define); a message's
``raw`` API response comes back as the JSON data it was stored as.

:func:`get_full_steps` and :func:`get_succinct_steps` give a recorded run
as smolagents' ``agent.memory.get_full_steps()`` and
``get_succinct_steps()`` give it; :func:`read_smolagents_dump` and
:func:`import_smolagents_dump` read a JSON dump of ``get_full_steps()``
back in as a run that restores. (:func:`full_steps` and
:func:`succinct_steps`, the stored items as dicts, are deprecated.)

The recorder follows ``agent.memory`` however steps get there:
``agent.run()``, ``agent.step()`` in a loop of the user's own (which fires
no step callbacks), appending to, replacing or clearing
``agent.memory.steps``. It watches the steps list (see
:meth:`SmolagentsRecorder.attach`), and attaches itself to an agent made
with it in ``step_callbacks``.
"""

from __future__ import annotations

from agents.integrations.smolagents._decode import restore_python_state, restore_steps
from agents.integrations.smolagents._dump import import_smolagents_dump, read_smolagents_dump
from agents.integrations.smolagents._fields import KINDS, UnsavedValueWarning
from agents.integrations.smolagents._recorder import SmolagentsRecorder
from agents.integrations.smolagents._views import (
    full_steps,
    get_full_steps,
    get_succinct_steps,
    succinct_steps,
)

__all__ = [
    "KINDS",
    "SmolagentsRecorder",
    "UnsavedValueWarning",
    "full_steps",
    "get_full_steps",
    "get_succinct_steps",
    "import_smolagents_dump",
    "read_smolagents_dump",
    "restore_python_state",
    "restore_steps",
    "succinct_steps",
]
