"""`python -m worker [extra celery worker options]`: see `worker.main`."""

from worker.main import main

main()
