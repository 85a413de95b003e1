"""What a long-lived process (a web worker, a Celery pool process, `run_periodic`) does once
start-up is over."""

import gc


def freeze_startup_objects() -> None:
    """Take what start-up made (modules, settings, URL patterns, models, pandas and plotly)
    out of the garbage collector's sight for good: it lives as long as the process, yet every
    full collection walked all of it again. At 1M jobs a gate evaluation of 50 backends made
    one or two of them, 60 ms each over 140,000 objects (docs/performance.md, "Garbage
    collection"). Garbage made so far is collected first, so none is kept; a forked child
    also stops touching the pages it shares with its parent (the use `gc.freeze` documents)."""
    gc.collect()
    gc.freeze()
