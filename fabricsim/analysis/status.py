"""How a run ended: its status, what it means for the figures, and the CLI exit code.

Statuses (``summary.json`` ``status`` and ``run.status``, ``run.json`` ``status``):

``complete``
    Every message completed. Exit code 0.
``incomplete_failed``
    Every message ended, but some failed (``retry_exceeded``, ``dependency_incomplete``,
    ``connection_error``, ...). Exit code 3.
``time_limit``
    ``simulation.time_limit`` stopped the run with messages unfinished. Exit code 3.
``stalled``
    Nothing could progress any more with messages unfinished. Exit code 3.
``interrupted``
    Ctrl-C or SIGTERM stopped the run; what finished is kept. Exit code 130.
``failed``
    The simulator itself failed (a :class:`~fabricsim.errors.SimulationError` or an unexpected
    exception); only ``run.json`` (with the reason) and ``messages.partial.csv`` (the messages
    finished before the failure) are written. Exit code 1.
``running``
    Written in ``run.json`` while the run goes on.

Every status but ``complete`` is *incomplete*: the per-message figures (FCT, slowdown,
packet latency) cover the completed messages only, and goodput divides the payload delivered by
the whole simulated time (first release to the run's end), so an incomplete run's figures
describe the part that was simulated, not the pattern (``summary.json`` ``incomplete`` says so).
"""
from __future__ import annotations

#: status -> CLI exit code
EXIT_CODES = {"complete": 0, "incomplete_failed": 3, "time_limit": 3, "stalled": 3, "interrupted": 130,
              "failed": 1}
#: the results-folder format written in ``summary.json``, ``run.json`` and the Parquet metadata
RESULTS_FORMAT = 1

#: a short phrase per incomplete status, for the summary line
_WHY = {"incomplete_failed": "some messages failed", "time_limit": "stopped at simulation.time_limit",
        "stalled": "nothing could progress", "interrupted": "interrupted", "failed": "the simulator failed"}

EXIT_CODES_HELP = ("Exit codes: 0 every message completed; 1 the simulator failed (run.json: status failed and the "
                   "reason); 2 bad input (one line naming the file and field; nothing written); 3 the run ended with "
                   "messages not completed (time limit, failed messages, stall: status in summary.json); "
                   "130 interrupted (Ctrl-C or SIGTERM; the finished messages are kept).")


def run_status(engine_status: str, not_completed: int) -> str:
    """The run's status from the engine's and the number of messages that did not complete.

    >>> run_status("complete", 0), run_status("complete", 2), run_status("incomplete", 1)
    ('complete', 'incomplete_failed', 'incomplete_failed')
    >>> run_status("time_limit", 5)
    'time_limit'
    """
    if engine_status in ("complete", "incomplete", "incomplete_failed"):
        return "incomplete_failed" if not_completed else "complete"
    return engine_status


def exit_code(status: str) -> int:
    """The CLI exit code of a run status (:data:`EXIT_CODES`; an unknown status is a failure)."""
    return EXIT_CODES.get(status, 1)


def incomplete_note(status: str, messages: dict) -> dict | None:
    """``summary.json`` ``incomplete``: why the run is incomplete and what its figures cover
    (``None`` for a complete run)."""
    if status == "complete":
        return None
    return {"status": status, "why": _WHY.get(status, status),
            "messages_not_completed": messages["incomplete"], "by_reason": dict(messages["incomplete_by_reason"]),
            "figures_cover": "per-message figures (fct, slowdown, packet_latency) cover completed messages only; "
                             "goodput is the payload delivered over the simulated time (first release to run.end_ps)"}


def describe(status: str, messages: dict) -> str:
    """One phrase for the summary line, e.g. ``time_limit: 10 of 32 messages not completed``."""
    if status == "complete":
        return "complete"
    n, total = messages["incomplete"], messages["total"]
    reasons = ", ".join(f"{k} {v}" for k, v in messages["incomplete_by_reason"].items())
    return f"{status.upper()} ({_WHY.get(status, status)}): {n} of {total} messages not completed" + \
        (f" ({reasons})" if reasons else "")
