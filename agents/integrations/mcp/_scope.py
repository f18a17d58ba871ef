"""What a server may touch (:class:`Scope`) and the error a client's bad argument gets."""

from __future__ import annotations

from typing import Any

import attrs

from agents.memory import InvalidArgumentError
from agents.memory.stores import check_session_id

__all__ = ["Scope", "ToolArgumentError"]


class ToolArgumentError(InvalidArgumentError):
    """A tool, resource or prompt argument a client sent is invalid or outside the server's scope.

    Attributes:
        argument: The name of the argument at fault.
    """

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(f"Argument {argument!r}: {message}")
        self.argument = argument


def _check_prefix(instance: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None:
        check_session_id(value)


def _one_of(instance: Scope, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None:
        check_session_id(value)
        if instance.prefix is not None:
            msg = "A scope is one session or a prefix of sessions, not both; pass session= or prefix=."
            raise InvalidArgumentError(msg)


@attrs.frozen
class Scope:
    """The sessions a server may read and write: one session, a prefix of session ids, or all.

    Args:
        session: Serve only this session.
        prefix: Serve only the sessions whose ids start with this text.
    """

    prefix: str | None = attrs.field(default=None, kw_only=True, validator=_check_prefix)
    session: str | None = attrs.field(default=None, kw_only=True, validator=_one_of)

    def allows(self, session_id: str) -> bool:
        """Return whether ``session_id`` lies inside the scope."""
        if self.session is not None:
            return session_id == self.session
        if self.prefix is not None:
            return session_id.startswith(self.prefix)
        return True

    def describe(self) -> str:
        """Return the scope in words, for messages and the server's instructions."""
        if self.session is not None:
            return f"only session {self.session!r}"
        if self.prefix is not None:
            return f"only the sessions whose ids start with {self.prefix!r}"
        return "every session of the store"
