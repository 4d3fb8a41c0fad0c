"""A scheduler in a process of its own (any start method), for the leader-change tests.

The test drives it through two pipes: it reports on ``reports`` and takes
commands on ``commands``. Its test hook wraps the module's
``publish_assignment``: once armed, the next call (a reschedule that has
already read the members and the function records) reports ``pausing`` with
what it read and stops the whole process with SIGSTOP, right before it
publishes; after SIGCONT it publishes and reports what happened
(``published``, or ``refused`` with the error).
"""

from __future__ import annotations

import faulthandler
import os
import signal
import threading
from multiprocessing.connection import Connection
from typing import Any

import pulsar

from pulsar_state import MetadataStore, PulsarMap
from pulsar_state.scheduling import scheduler as scheduler_module
from pulsar_state.scheduling.scheduler import Scheduler


def scheduler_process(settings: dict[str, Any], commands: Connection, reports: Connection) -> None:
    """Run a :class:`Scheduler` until told to stop. ``settings``: ``service_url``,
    ``admin_url``, ``meta_topic``, ``assign_topic``, ``member_id``, ``root``,
    ``session_timeout_s``."""
    faulthandler.enable()
    sending = threading.Lock()

    def report(*what: Any) -> None:
        with sending:
            reports.send(what)

    armed = threading.Event()
    real_publish = scheduler_module.publish_assignment

    def publish_then_maybe_pause(*args: Any, **kwargs: Any) -> Any:
        if not armed.is_set():
            return real_publish(*args, **kwargs)
        armed.clear()
        _, wanted, members = args[:3]
        report("pausing", {"wanted": list(wanted), "members": list(members), "kwargs": kwargs})
        os.kill(os.getpid(), signal.SIGSTOP)  # the whole process, until SIGCONT
        try:
            result = real_publish(*args, **kwargs)
        except Exception as exc:
            report("refused", type(exc).__name__, str(exc))
            raise
        report("published", result)
        return result

    scheduler_module.publish_assignment = publish_then_maybe_pause  # type: ignore[assignment]
    client = pulsar.Client(
        settings["service_url"], logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    admin_url = settings["admin_url"]
    store = MetadataStore(
        client,
        settings["meta_topic"],
        admin_url=admin_url,
        session_timeout_s=settings["session_timeout_s"],
        session_check_interval_s=0.5,
    )
    assignments = PulsarMap[str, str](client, settings["assign_topic"], admin_url=admin_url)
    scheduler = Scheduler(
        store, assignments, member_id=settings["member_id"], root=settings["root"]
    ).start()
    report("started", store.session_id)
    try:
        while True:
            command = commands.recv()
            if command == "arm":
                armed.set()
                report("armed")
            elif command == "stop":
                break
    except EOFError:  # the test went away
        pass
    finally:
        scheduler.close()
        assignments.close()
        store.close()
        client.close()
