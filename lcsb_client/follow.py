"""`lcsb jobs follow`: read a job's event stream to the end with a progress bar (without a terminal,
plain progress lines: `progress.FollowDisplay`), then report how the job ended. Exit code 0 when it
succeeded, 1 when it failed or was cancelled.

    code = follow_job(svc, "ftjob-...", console)            # from the first event
    code = follow_job(svc, "ftjob-...", console, after="ftevent-...")   # only events after that one
"""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from lcsb_client.progress import FollowDisplay
from lcsb_client.render import job_error, print_error
from lcsb_client.service import Service
from lcsb_client.sse import EventFollower

EXIT_SUCCEEDED, EXIT_UNSUCCESSFUL = 0, 1


def report_outcome(console: Console, job: dict) -> int:
    """Print the job's final state; its exit code."""
    status = job.get("status")
    if status == "succeeded":
        tokens = job.get("trained_tokens")
        console.print(Text(f"{job['id']} succeeded: fine-tuned model {job.get('fine_tuned_model')}"
                           + (f", {tokens:,} trained tokens" if tokens else ""), style="green"), soft_wrap=True)
        return EXIT_SUCCEEDED
    if status == "failed":
        console.print(Text(f"{job['id']} failed", style="red"))
        print_error(console, job_error(job))
    elif status == "cancelled":
        console.print(Text(f"{job['id']} was cancelled", style="yellow"))
    else:
        console.print(Text(f"{job['id']} is {status}"))
    return EXIT_UNSUCCESSFUL


def follow_job(svc: Service, job_id: str, console: Console, *, after: str | None = None,
               max_failures: int = 5, backoff_s: float = 0.5) -> int:
    """Follow the job's events until it ends (reconnecting with Last-Event-ID when the connection
    drops); returns the exit code of its outcome.

    Raises:
        ClientError: unknown job, an `after` that is not one of its events, or `connection_lost`.
    """
    job = svc.get_job(job_id)
    with FollowDisplay(console, job) as display:
        def reconnecting(reason: str, last_event_id: str | None) -> None:
            display.note(f"{reason}; reconnecting after {last_event_id or 'the first event'}")

        follower = EventFollower(lambda last_id: svc.event_stream(job_id, last_id), last_event_id=after,
                                 max_failures=max_failures, backoff_s=backoff_s, on_reconnect=reconnecting)
        try:
            for event in follower:
                display.show(event)
        except KeyboardInterrupt:
            resume = f" --after {follower.last_event_id}" if follower.last_event_id else ""
            display.note(f"stopped following; the job goes on (lcsb jobs follow {job_id}{resume} to continue, "
                         f"lcsb jobs cancel {job_id} to stop it)", "")
            raise
    return report_outcome(console, svc.get_job(job_id))
