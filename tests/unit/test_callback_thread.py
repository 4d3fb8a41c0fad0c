"""The manager's hand-over threads (state/core/callback_thread.py): callables run
in order on a thread of their own; once closed, ``offer`` runs nothing and
says so, so that the client's IO thread never runs what it hands over."""

from __future__ import annotations

import threading

from pulsar_state.core.callback_thread import CallbackThread


def test_handed_over_callables_run_in_order_on_the_thread() -> None:
    thread = CallbackThread("pss-test-order")
    ran: list[tuple[int, str]] = []
    done = threading.Event()
    for i in range(50):
        assert thread.offer(lambda i=i: ran.append((i, threading.current_thread().name)))
    thread.submit(done.set)
    assert done.wait(30)
    assert ran == [(i, "pss-test-order") for i in range(50)]
    thread.close(timeout_s=30)


def test_offer_after_close_runs_nothing_anywhere() -> None:
    thread = CallbackThread("pss-test-closed")
    ran: list[str] = []
    thread.close(timeout_s=30)
    assert thread.offer(lambda: ran.append(threading.current_thread().name)) is False
    assert ran == []
    # submit (users' callbacks of a manager torn down) still runs, on the caller
    thread.submit(lambda: ran.append(threading.current_thread().name))
    assert ran == [threading.current_thread().name]


def test_close_runs_what_was_offered_before_it() -> None:
    thread = CallbackThread("pss-test-drain")
    release = threading.Event()
    ran: list[int] = []
    assert thread.offer(release.wait, 30)
    for i in range(5):
        assert thread.offer(ran.append, i)
    closing = threading.Thread(target=thread.close, kwargs={"timeout_s": 30})
    closing.start()
    release.set()
    closing.join(30)
    assert ran == [0, 1, 2, 3, 4]
