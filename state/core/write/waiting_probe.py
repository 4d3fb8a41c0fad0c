"""Whether another writer waits for the topic, asked off the writer's thread.

In the queueing access modes a holder lets the topic go every
``max_tenure_s`` so that writers queued behind it get their turn; a lone
writer keeps it when the broker counts nobody waiting (the topic's stats,
``waitingPublishers``). That question is an admin REST call: a few
milliseconds on a quiet broker, up to its timeout on a slow one. Asked on the
writer's thread, every write queued meanwhile waited for it (issue #25: no
blocking call on the write path that the write does not need).

:class:`WaitingProbe` asks on a thread of its own and hands the answer
forward: the writer starts a question (:meth:`ask`) and later takes the
answer if it has come (:meth:`answer`), never waiting for it. One question
at a time; its thread exists while a question is open.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future

from pulsar_state.core import futures
from pulsar_state.errors import PermissionDeniedError

__all__ = ["NO_ANSWER", "WaitingProbe"]

log = logging.getLogger(__name__)

#: :meth:`WaitingProbe.answer` when no answer has come (or it was unknown)
NO_ANSWER = -1


class WaitingProbe:
    """Asks ``waiting_writers(timeout_s=...)`` on its own thread, one question at a time.

    Used by the writer thread only (:meth:`ask`, :meth:`answer`); the asking
    thread only completes a future.
    """

    def __init__(self, topic: str, waiting_writers: Callable[..., int]) -> None:
        self._topic = topic
        self._waiting_writers: Callable[..., int] | None = waiting_writers
        self._question: Future[int] | None = None
        self._tag: object = None

    @property
    def enabled(self) -> bool:
        """False once the broker refused this role the topic's stats (never asked again)."""
        return self._waiting_writers is not None

    @property
    def asking(self) -> bool:
        """Whether a question is open (asked, its answer not taken yet)."""
        return self._question is not None

    def ask(self, *, timeout_s: float, tag: object) -> None:
        """Start a question bounded by ``timeout_s`` (nothing when one is open or
        the probe is disabled); ``tag`` names what it is about (the tenure):
        :meth:`answer` gives the answer only for the same tag."""
        ask = self._waiting_writers
        if ask is None or self._question is not None:
            return
        question: Future[int] = Future()
        self._question, self._tag = question, tag
        try:
            threading.Thread(
                target=futures.run_into,
                args=(question, lambda: ask(timeout_s=timeout_s)),
                name=f"pss-probe-{self._topic.rsplit('/', 1)[-1]}",
                daemon=True,
            ).start()
        except RuntimeError as exc:  # no new thread (interpreter shutdown): unknown
            futures.set_exception(question, exc)

    def answer(self, *, tag: object) -> int:
        """How many writers wait, if the open question about ``tag`` has its
        answer (the question is then closed); else :data:`NO_ANSWER` (not
        asked, not answered yet, unknown, or about another tag)."""
        question = self._question
        if question is None or not question.done():
            return NO_ANSWER
        self._question = None
        if self._tag != tag:
            return NO_ANSWER
        try:
            return question.result()
        except PermissionDeniedError as exc:
            log.warning(
                "%s: cannot read the topic's stats (%s); this writer lets go of the "
                "topic at the end of every tenure whether or not another writer waits",
                self._topic,
                exc,
            )
            self._waiting_writers = None
        except Exception as exc:  # unknown: the tenure ends as if a writer waited
            log.debug("could not tell whether writers wait for %s: %s", self._topic, exc)
        return NO_ANSWER
